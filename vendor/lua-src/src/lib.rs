//! Builds the patched Lua 5.1.5 in `lua-5.1.5/` into a static library for mlua-sys.
//!
//! mlua-sys's build script calls `Build::new().build(Lua51)` and then
//! `Artifacts::print_cargo_metadata`; this crate offers exactly that surface, so it can
//! replace the crates.io `lua-src` through `[patch.crates-io]`. What the patches change, and
//! why, is in README.md beside this file.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The Lua versions mlua-sys may ask for. Only [`Version::Lua51`] is vendored here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Lua51,
    Lua52,
    Lua53,
    Lua54,
}
pub use Version::*;

/// Where to build, for which target.
pub struct Build {
    out_dir: Option<PathBuf>,
    target: Option<String>,
    host: Option<String>,
}

/// What a build produced: the static library and the public headers.
pub struct Artifacts {
    include_dir: PathBuf,
    lib_dir: PathBuf,
    libs: Vec<String>,
}

/// The interpreter's C sources. The standalone `lua`/`luac` programs and `print.c` are left
/// out; the io, os and package libraries are compiled because mlua links their openers, though
/// Podium never opens them.
const SOURCES: &[&str] = &[
    "lapi.c",
    "lauxlib.c",
    "lbaselib.c",
    "lcode.c",
    "ldblib.c",
    "ldebug.c",
    "ldo.c",
    "ldump.c",
    "lfunc.c",
    "lgc.c",
    "linit.c",
    "liolib.c",
    "llex.c",
    "lmathlib.c",
    "lmem.c",
    "loadlib.c",
    "lobject.c",
    "lopcodes.c",
    "loslib.c",
    "lparser.c",
    "lstate.c",
    "lstring.c",
    "lstrlib.c",
    "ltable.c",
    "ltablib.c",
    "ltm.c",
    "lundump.c",
    "lvm.c",
    "lzio.c",
];

const HEADERS: &[&str] = &["lauxlib.h", "lua.h", "luaconf.h", "lualib.h"];

impl Default for Build {
    fn default() -> Self {
        Self::new()
    }
}

impl Build {
    pub fn new() -> Build {
        Build {
            out_dir: env::var_os("OUT_DIR").map(|dir| PathBuf::from(dir).join("lua-build")),
            target: env::var("TARGET").ok(),
            host: env::var("HOST").ok(),
        }
    }

    pub fn out_dir<P: AsRef<Path>>(&mut self, path: P) -> &mut Build {
        self.out_dir = Some(path.as_ref().to_path_buf());
        self
    }

    pub fn target(&mut self, target: &str) -> &mut Build {
        self.target = Some(target.to_string());
        self
    }

    pub fn host(&mut self, host: &str) -> &mut Build {
        self.host = Some(host.to_string());
        self
    }

    /// Compiles the sources into `liblua5.1.a` and copies the headers beside it. Panics (a
    /// build-script failure) on anything but Lua 5.1 on a Unix-like target.
    pub fn build(&mut self, version: Version) -> Artifacts {
        assert!(
            version == Lua51,
            "Podium vendors only Lua 5.1.5 (asked for {version:?})"
        );
        let target = self.target.clone().expect("TARGET is not set");
        let host = self.host.clone().expect("HOST is not set");
        let out_dir = self.out_dir.clone().expect("OUT_DIR is not set");
        let lib_dir = out_dir.join("lib");
        let include_dir = out_dir.join("include");
        for dir in [&lib_dir, &include_dir] {
            if dir.exists() {
                fs::remove_dir_all(dir).expect("cannot clear the Lua build folder");
            }
            fs::create_dir_all(dir).expect("cannot create the Lua build folder");
        }
        let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua-5.1.5");
        println!("cargo:rerun-if-changed={}", source_dir.display());

        let mut cc = cc::Build::new();
        cc.target(&target)
            .host(&host)
            .warnings(false)
            .opt_level(2)
            .cargo_metadata(false)
            .include(&source_dir)
            .flag("-w")
            .flag_if_supported("-fno-common");
        if target.contains("linux") || target.ends_with("bsd") || target.contains("apple") {
            cc.define("LUA_USE_LINUX", None);
        } else {
            panic!("Podium's Lua build knows only Unix-like targets, not {target}");
        }
        if cfg!(debug_assertions) {
            cc.define("LUA_USE_APICHECK", None);
        }
        for file in SOURCES {
            cc.file(source_dir.join(file));
        }
        cc.out_dir(&lib_dir).compile("lua5.1");
        for header in HEADERS {
            fs::copy(source_dir.join(header), include_dir.join(header))
                .expect("cannot copy a Lua header");
        }
        Artifacts {
            include_dir,
            lib_dir,
            libs: vec!["lua5.1".to_string()],
        }
    }
}

impl Artifacts {
    pub fn include_dir(&self) -> &Path {
        &self.include_dir
    }

    pub fn lib_dir(&self) -> &Path {
        &self.lib_dir
    }

    pub fn libs(&self) -> &[String] {
        &self.libs
    }

    /// The lines mlua-sys's build script prints so that rustc links the library.
    pub fn print_cargo_metadata(&self) {
        println!("cargo:rustc-link-search=native={}", self.lib_dir.display());
        for lib in &self.libs {
            println!("cargo:rustc-link-lib=static={lib}");
        }
        println!("cargo:include={}", self.include_dir.display());
        println!("cargo:lib={}", self.lib_dir.display());
    }
}
