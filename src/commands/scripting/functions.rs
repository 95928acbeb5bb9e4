//! Redis 7.0 functions: FUNCTION LOAD / DELETE / FLUSH / LIST / STATS / KILL and FCALL /
//! FCALL_RO.
//!
//! A library is Lua code that starts with `#!lua name=<library>`; FUNCTION LOAD runs it once
//! with only `redis.register_function`, `redis.log` and the version in reach, and keeps the
//! functions it registers (name, callback, description, flags). The registry here holds each
//! library's code and what it registered; every worker thread's Lua state runs a library's
//! code again the first time it calls one of its functions (the code only registers
//! callbacks, so each state ends up with the same ones), keyed by a load id so a replaced
//! library is reloaded. FCALL runs a callback with the keys and arguments as its two
//! parameters, under the same rules as EVAL (atomic, effects in the AOF in MULTI/EXEC, the
//! function's flags checked as a shebang's are). FUNCTION LOAD, DELETE and FLUSH are written
//! to the AOF as sent, so a restart loads the same libraries.

use super::register::{valid_name, Registered};
use super::ScriptFlags;
use crate::commands::args::eq;
use crate::commands::{CmdResult, Ctx};
use crate::protocol::Reply;
use crate::state::scripts::LibraryPolicy as Policy;
pub(crate) use crate::state::scripts::{FunctionInfo, Library, Registry};
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A function as the registry keeps it (the callback lives in each Lua state).
impl Registry {
    /// Bytes of the libraries' code and of the library and function names.
    pub(crate) fn memory_bytes(&self) -> usize {
        let libraries: usize = self
            .libraries
            .values()
            .map(|l| {
                l.name.len()
                    + l.code.len()
                    + l.functions
                        .iter()
                        .map(|f| f.name.len() + f.description.as_ref().map_or(0, |d| d.len()))
                        .sum::<usize>()
            })
            .sum();
        libraries
            + self
                .functions
                .iter()
                .map(|(f, l)| f.len() + l.len())
                .sum::<usize>()
    }

    /// How many functions and libraries are loaded.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.functions.len(), self.libraries.len())
    }
}

static NEXT_LOAD_ID: AtomicU64 = AtomicU64::new(1);

/// The library name in a FUNCTION LOAD payload's shebang line (Redis's
/// functionExtractLibMetaData), and where its code starts.
fn library_metadata(payload: &[u8]) -> Result<(String, usize), String> {
    if !payload.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = payload.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    // Split as Redis splits it (sdssplitargs: quotes and escapes allowed, `name="foo"`).
    let Some(parts) = crate::protocol::split_args(&payload[..end]) else {
        return Err("ERR Invalid library metadata".into());
    };
    let parts: Vec<String> = parts
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if parts.is_empty() || parts[0].len() < 2 {
        return Err("ERR Invalid library metadata".into());
    }
    let engine = &parts[0][2..];
    let mut name: Option<String> = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("ERR Invalid metadata value given: {part}"));
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if !valid_name(&name) {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    Ok((name, end))
}

/// FUNCTION LOAD [REPLACE] code.
fn load(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let mut replace = false;
    let mut pos = 2;
    while pos < a.len() - 1 {
        if eq(&a[pos], "replace") {
            replace = true;
            pos += 1;
            continue;
        }
        return Reply::Error(format!(
            "ERR Unknown option given: {}",
            String::from_utf8_lossy(&a[pos])
        ));
    }
    if pos >= a.len() {
        return Reply::error("ERR Function code is missing");
    }
    let payload = a[pos].clone();
    let (name, code_start) = match library_metadata(&payload) {
        Ok(m) => m,
        Err(e) => return Reply::Error(e),
    };
    let scripts = &ctx.srv.scripts;
    if !replace && scripts.functions.lock().libraries.contains_key(&name) {
        return Reply::Error(format!("ERR Library '{name}' already exists"));
    }
    let load_id = NEXT_LOAD_ID.fetch_add(1, Ordering::Relaxed);
    let id = scripts.engine_id();
    let loaded = super::engine::with_engine(id, |engine| {
        let registered = engine.load_library(&payload[code_start..])?;
        if registered.is_empty() {
            return Err("ERR No functions registered".to_string());
        }
        let infos: Vec<FunctionInfo> = registered
            .iter()
            .map(|r| FunctionInfo {
                name: r.name.clone(),
                description: r.description.clone(),
                flags: r.flags,
            })
            .collect();
        let mut registry = scripts.functions.lock();
        for f in &infos {
            if let Some(owner) = registry.functions.get(&f.name.to_ascii_lowercase()) {
                if *owner != name {
                    return Err(format!("ERR Function {} already exists", f.name));
                }
            }
        }
        if let Some(old) = registry.libraries.remove(&name) {
            for f in &old.functions {
                registry.functions.remove(&f.name.to_ascii_lowercase());
            }
        }
        for f in &infos {
            registry
                .functions
                .insert(f.name.to_ascii_lowercase(), name.clone());
        }
        registry.libraries.insert(
            name.clone(),
            Arc::new(Library {
                name: name.clone(),
                code: payload.clone(),
                code_start,
                functions: infos,
                load_id,
                one_db: super::stays_in_one_db(&payload[code_start..]),
            }),
        );
        drop(registry);
        engine.keep_library(&name, load_id, &registered);
        Ok(())
    });
    match loaded {
        Ok(Ok(())) => {
            ctx.dirty += 1;
            Reply::Bulk(Bytes::from(name))
        }
        Ok(Err(e)) | Err(e) => Reply::Error(e),
    }
}

/// Redis-style glob match of `pattern` against `text` (FUNCTION LIST LIBRARYNAME).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    crate::util::numtext::glob_match(pattern, text, false)
}

/// FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern].
fn list(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let mut with_code = false;
    let mut pattern: Option<Bytes> = None;
    let mut i = 2;
    while i < a.len() {
        // Each option once (Redis: a repeated one is an unknown argument).
        if !with_code && eq(&a[i], "withcode") {
            with_code = true;
            i += 1;
        } else if pattern.is_none() && eq(&a[i], "libraryname") {
            if i + 1 >= a.len() {
                return Reply::error("ERR library name argument was not given");
            }
            pattern = Some(a[i + 1].clone());
            i += 2;
        } else {
            return Reply::Error(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(&a[i])
            ));
        }
    }
    let registry = ctx.srv.scripts.functions.lock();
    let mut out = Vec::new();
    for lib in registry.libraries.values() {
        if let Some(p) = &pattern {
            if !glob(p, lib.name.as_bytes()) {
                continue;
            }
        }
        let functions = lib
            .functions
            .iter()
            .map(|f| {
                Reply::Map(vec![
                    (
                        Reply::bulk_slice(b"name"),
                        Reply::Bulk(Bytes::from(f.name.clone())),
                    ),
                    (
                        Reply::bulk_slice(b"description"),
                        f.description
                            .clone()
                            .map(Reply::Bulk)
                            .unwrap_or(Reply::Null),
                    ),
                    (Reply::bulk_slice(b"flags"), Reply::Set(flag_names(f.flags))),
                ])
            })
            .collect();
        let mut fields = vec![
            (
                Reply::bulk_slice(b"library_name"),
                Reply::Bulk(Bytes::from(lib.name.clone())),
            ),
            (Reply::bulk_slice(b"engine"), Reply::bulk_slice(b"LUA")),
            (Reply::bulk_slice(b"functions"), Reply::Array(functions)),
        ];
        if with_code {
            fields.push((
                Reply::bulk_slice(b"library_code"),
                Reply::Bulk(lib.code.clone()),
            ));
        }
        out.push(Reply::Map(fields));
    }
    Reply::Array(out)
}

/// A function's flags as FUNCTION LIST names them.
fn flag_names(flags: u8) -> Vec<Reply> {
    [
        (ScriptFlags::NO_WRITES, "no-writes"),
        (ScriptFlags::ALLOW_OOM, "allow-oom"),
        (ScriptFlags::ALLOW_STALE, "allow-stale"),
        (ScriptFlags::NO_CLUSTER, "no-cluster"),
        (ScriptFlags::ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
    ]
    .iter()
    .filter(|(f, _)| flags & f != 0)
    .map(|(_, n)| Reply::Status(n))
    .collect()
}

/// FUNCTION <subcommand>.
pub(super) fn function(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let scripts = &ctx.srv.scripts;
    match sub.as_str() {
        "load" if a.len() >= 3 => Ok(load(ctx, a)),
        "delete" if a.len() == 3 => {
            let name = String::from_utf8_lossy(&a[2]).into_owned();
            let mut registry = scripts.functions.lock();
            let Some(lib) = registry.libraries.remove(&name) else {
                return Err(Reply::error("ERR Library not found"));
            };
            for f in &lib.functions {
                registry.functions.remove(&f.name.to_ascii_lowercase());
            }
            drop(registry);
            ctx.dirty += 1;
            Ok(Reply::Ok)
        }
        "flush" if a.len() > 3 => Err(Reply::error(
            "ERR unknown subcommand or wrong number of arguments for 'flush'. Try FUNCTION HELP.",
        )),
        "flush" => {
            if a.len() == 3 && !(eq(&a[2], "async") || eq(&a[2], "sync")) {
                return Err(Reply::error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"));
            }
            let mut registry = scripts.functions.lock();
            registry.libraries.clear();
            registry.functions.clear();
            drop(registry);
            ctx.dirty += 1;
            Ok(Reply::Ok)
        }
        "list" => Ok(list(ctx, a)),
        "kill" if a.len() == 2 => Ok(super::kill_running(scripts, false)),
        "stats" if a.len() == 2 => {
            let registry = scripts.functions.lock();
            let running = match scripts.running_function() {
                Some((name, command, ms)) => Reply::Map(vec![
                    (Reply::bulk_slice(b"name"), Reply::Bulk(Bytes::from(name))),
                    (
                        Reply::bulk_slice(b"command"),
                        Reply::Array(command.into_iter().map(Reply::Bulk).collect()),
                    ),
                    (Reply::bulk_slice(b"duration_ms"), Reply::Int(ms)),
                ]),
                None => Reply::Null,
            };
            Ok(Reply::Map(vec![
                (Reply::bulk_slice(b"running_script"), running),
                (
                    Reply::bulk_slice(b"engines"),
                    Reply::Map(vec![(
                        Reply::bulk_slice(b"LUA"),
                        Reply::Map(vec![
                            (
                                Reply::bulk_slice(b"libraries_count"),
                                Reply::Int(registry.libraries.len() as i64),
                            ),
                            (
                                Reply::bulk_slice(b"functions_count"),
                                Reply::Int(registry.functions.len() as i64),
                            ),
                        ]),
                    )]),
                ),
            ]))
        }
        "dump" if a.len() == 2 => Ok(dump(ctx)),
        "restore" if a.len() > 4 => Err(Reply::error(
            "ERR unknown subcommand or wrong number of arguments for 'restore'. Try FUNCTION HELP.",
        )),
        "restore" if a.len() >= 3 => Ok(restore(ctx, a)),
        "help" if a.len() == 2 => Ok(Reply::Array(
            [
                "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "LOAD [REPLACE] <FUNCTION CODE>",
                "    Create a new library with the given library name and code.",
                "DELETE <LIBRARY NAME>",
                "    Delete the given library.",
                "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
                "    Return general information on all the libraries:",
                "    * Library name",
                "    * The engine used to run the Library",
                "    * Library description",
                "    * Functions list",
                "    * Library code (if WITHCODE is given)",
                "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
                "STATS",
                "    Return information about the current function running:",
                "    * Function name",
                "    * Command used to run the function",
                "    * Duration in MS that the function is running",
                "    If no function is running, return nil",
                "    In addition, returns a list of available engines.",
                "KILL",
                "    Kill the current running function.",
                "FLUSH [ASYNC|SYNC]",
                "    Delete all the libraries.",
                "    When called without the optional mode argument, the behavior is determined by the",
                "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                "    * ASYNC: Asynchronously flush the libraries.",
                "    * SYNC: Synchronously flush the libraries.",
                "DUMP",
                "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
                "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
                "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
                "    control how to handle existing libraries (default APPEND):",
                "    * FLUSH: delete all existing libraries.",
                "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
                "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
                "      libraries with the new libraries (notice that even on this option there is a chance of failure",
                "      in case of functions name collision with another library).",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        "load" | "delete" | "kill" | "stats" | "help" | "dump" | "restore" => {
            Err(crate::cmdspec::wrong_arity(&format!("function|{sub}")))
        }
        _ => Err(Reply::Error(format!(
            "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

/// RDB opcodes of a library in a FUNCTION DUMP payload (and an RDB file): Redis 7.0's form
/// (the code, shebang line included) and 7.0-rc's (name, engine, description, code).
const OP_FUNCTION2: u8 = 0xF5;
const OP_FUNCTION_RC: u8 = 0xF6;

/// FUNCTION DUMP: Redis's payload, so redis-server restores it and the reverse: each library
/// as OP_FUNCTION2 and its code as an RDB string, then the RDB version (2 bytes) and the
/// CRC64 of all that (8 bytes), little-endian, as DUMP's.
fn dump(ctx: &mut Ctx) -> Reply {
    use crate::persistence::{rdb, rdb_encoding};
    let registry = ctx.srv.scripts.functions.lock();
    let mut out = Vec::new();
    for lib in registry.libraries.values() {
        out.push(OP_FUNCTION2);
        rdb_encoding::put_string(&mut out, &lib.code);
    }
    drop(registry);
    out.extend_from_slice(&rdb::RDB_VERSION.to_le_bytes());
    let crc = rdb::crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    Reply::Bulk(Bytes::from(out))
}

/// The library codes in a FUNCTION DUMP payload, or Redis's error text.
fn payload_libraries(payload: &[u8]) -> Result<Vec<Bytes>, String> {
    use crate::persistence::{rdb, rdb_encoding};
    const WRONG: &str = "ERR DUMP payload version or checksum are wrong";
    if payload.len() < 10 {
        return Err(WRONG.into());
    }
    let body = payload.len() - 10;
    let version = u16::from_le_bytes([payload[body], payload[body + 1]]);
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&payload[body + 2..]);
    if version > rdb::RDB_VERSION || rdb::crc64(0, &payload[..body + 2]) != u64::from_le_bytes(crc)
    {
        return Err(WRONG.into());
    }
    let mut r = rdb_encoding::Reader {
        buf: &payload[..body],
        pos: 0,
    };
    let mut codes = Vec::new();
    while r.remaining() > 0 {
        let code = match r.byte() {
            Some(OP_FUNCTION2) => r.string().ok_or("ERR Failed loading library payload")?,
            Some(OP_FUNCTION_RC) => {
                let name = r.string().ok_or("ERR Failed loading library name")?;
                let engine = r.string().ok_or("ERR Failed loading engine name")?;
                let has_description = r
                    .len()
                    .ok_or("ERR Failed loading library description indicator")?;
                if has_description != 0 {
                    r.string().ok_or("ERR Failed loading library description")?;
                }
                let blob = r.string().ok_or("ERR Failed loading library blob")?;
                let mut code = b"#!".to_vec();
                code.extend_from_slice(&engine);
                code.extend_from_slice(b" name=");
                code.extend_from_slice(&name);
                code.push(b'\n');
                code.extend_from_slice(&blob);
                code
            }
            _ => return Err("ERR given type is not a function".into()),
        };
        codes.push(Bytes::from(code));
    }
    Ok(codes)
}

/// FUNCTION RESTORE payload [FLUSH | APPEND | REPLACE]: the payload's libraries are all
/// loaded (each run once, as FUNCTION LOAD does) before anything changes; then FLUSH
/// replaces every library, APPEND (the default) refuses a library name already loaded, and
/// REPLACE replaces same-named libraries; a function name taken by another library refuses
/// the whole restore.
fn restore(ctx: &mut Ctx, a: &[Bytes]) -> Reply {
    let policy =
        match a.get(3) {
            None => Policy::Append,
            Some(p) if eq(p, "append") => Policy::Append,
            Some(p) if eq(p, "replace") => Policy::Replace,
            Some(p) if eq(p, "flush") => Policy::Flush,
            Some(_) => return Reply::error(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ),
        };
    let codes = match payload_libraries(&a[2]) {
        Ok(c) => c,
        Err(e) => return Reply::Error(e),
    };
    match restore_libraries(ctx.srv, codes, policy) {
        Ok(()) => {
            ctx.dirty += 1;
            Reply::Ok
        }
        Err(e) => Reply::Error(e),
    }
}

/// Load libraries `codes` (each a whole FUNCTION LOAD payload) under `policy`: each is run
/// once first, and nothing changes unless all of them load; Redis's error text otherwise.
pub(crate) fn restore_libraries(
    srv: &crate::state::Server,
    codes: Vec<Bytes>,
    policy: Policy,
) -> Result<(), String> {
    let scripts = &srv.scripts;
    let id = scripts.engine_id();
    let loaded = super::engine::with_engine(id, |engine| -> Result<(), String> {
        // Load every library of the payload into a registry of its own first.
        let mut new: Vec<(Arc<Library>, Vec<Registered>)> = Vec::new();
        for code in codes {
            let (name, code_start) = library_metadata(&code)?;
            if new.iter().any(|(l, _)| l.name == name) {
                return Err(format!("ERR Library '{name}' already exists"));
            }
            let registered = engine.load_library(&code[code_start..])?;
            if registered.is_empty() {
                return Err("ERR No functions registered".into());
            }
            for f in &registered {
                let taken = new
                    .iter()
                    .flat_map(|(l, _)| &l.functions)
                    .any(|g| g.name.eq_ignore_ascii_case(&f.name));
                if taken {
                    return Err(format!("ERR Function {} already exists", f.name));
                }
            }
            let library = Library {
                name,
                functions: registered
                    .iter()
                    .map(|r| FunctionInfo {
                        name: r.name.clone(),
                        description: r.description.clone(),
                        flags: r.flags,
                    })
                    .collect(),
                load_id: NEXT_LOAD_ID.fetch_add(1, Ordering::Relaxed),
                one_db: super::stays_in_one_db(&code[code_start..]),
                code,
                code_start,
            };
            new.push((Arc::new(library), registered));
        }
        let mut registry = scripts.functions.lock();
        if policy == Policy::Flush {
            *registry = Registry::default();
        }
        let mut replaced = Vec::new();
        for (lib, _) in &new {
            if registry.libraries.contains_key(&lib.name) {
                if policy != Policy::Replace {
                    return Err(format!("ERR Library {} already exists", lib.name));
                }
                replaced.push(lib.name.clone());
            }
        }
        for (lib, _) in &new {
            for f in &lib.functions {
                if let Some(owner) = registry.functions.get(&f.name.to_ascii_lowercase()) {
                    if !replaced.contains(owner) {
                        return Err(format!("ERR Function {} already exists", f.name));
                    }
                }
            }
        }
        for name in &replaced {
            if let Some(old) = registry.libraries.remove(name) {
                for f in &old.functions {
                    registry.functions.remove(&f.name.to_ascii_lowercase());
                }
            }
        }
        for (lib, registered) in new {
            for f in &lib.functions {
                registry
                    .functions
                    .insert(f.name.to_ascii_lowercase(), lib.name.clone());
            }
            engine.keep_library(&lib.name, lib.load_id, &registered);
            registry.libraries.insert(lib.name.clone(), lib);
        }
        Ok(())
    });
    match loaded {
        Ok(result) => result,
        Err(e) => Err(e),
    }
}

/// The library of function `name` (FCALL).
pub(super) fn find(ctx: &Ctx, name: &str) -> Option<(Arc<Library>, FunctionInfo)> {
    let registry = ctx.srv.scripts.functions.lock();
    let lib = registry
        .libraries
        .get(registry.functions.get(&name.to_ascii_lowercase())?)?
        .clone();
    let info = lib
        .functions
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case(name))?
        .clone();
    Some((lib, info))
}

/// The flags of function `name`, if it exists (CLIENT PAUSE asks whether an FCALL may write).
pub(super) fn flags_of(srv: &crate::state::Server, name: &[u8]) -> Option<u8> {
    let name = std::str::from_utf8(name).ok()?;
    let registry = srv.scripts.functions.lock();
    let lib = registry.libraries.get(registry.functions.get(name)?)?;
    lib.functions
        .iter()
        .find(|f| f.name == name)
        .map(|f| f.flags)
}
