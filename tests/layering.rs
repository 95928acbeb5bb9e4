//! The module layering as a test: runs tests/layering/import-graph.sh, which lists the
//! dependencies between the crate's modules (between top-level modules, and between the files
//! of each folder) and reports cycles. The crate has none (see the README's "Layering"): a
//! module that imports one above it, or a file that imports one that imports it, fails this
//! test, and so does a README whose list of layers no longer matches the imports. The other
//! tests check the checker: cycles planted in a copy of the sources (between top-level
//! modules, and between two files of one folder) are reported, and small trees written here
//! pin down what counts as a reference, so the first test cannot pass by the script seeing
//! nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn import_graph(src: Option<&Path>, args: &[&str]) -> (bool, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/layering/import-graph.sh"
    );
    let mut cmd = Command::new("bash");
    cmd.arg(script).args(args);
    if let Some(src) = src {
        cmd.env("PODIUM_SRC", src);
    }
    let out = cmd
        .output()
        .expect("bash runs tests/layering/import-graph.sh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn no_module_imports_a_module_above_it() {
    let (ok, report) = import_graph(None, &["--check"]);
    assert!(ok, "import-graph.sh --check found a cycle:\n{report}");
    assert!(report.contains("no cycles"), "{report}");
    // The graph is not empty: the script did read the sources, between top-level modules and
    // inside folders.
    assert!(report.contains("commands -> keyspace"), "{report}");
    assert!(
        report.contains("types::zset -> types::skiplist"),
        "{report}"
    );
    assert!(
        report.contains("persistence::snapshot -> persistence::rdb"),
        "{report}"
    );
}

/// The connection reads, parses and acts on what the dispatcher hands back (`Outcome`, and a
/// `commands::takeover` for the work a command leaves it): it knows nothing of replication
/// or shutdown, whose waits run behind that value.
#[test]
fn the_connection_does_not_reach_into_replication_or_shutdown() {
    let (_, report) = import_graph(None, &[]);
    assert!(report.contains("connection -> commands"), "{report}");
    for lower in ["replication", "shutdown"] {
        assert!(
            !report.contains(&format!("connection -> {lower} ")),
            "connection imports {lower}:\n{report}"
        );
    }
}

/// The layers README's "Layering" lists, one number per line: module name -> line number.
fn readme_layers() -> std::collections::HashMap<String, usize> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = readme
        .split("\n### Layering\n")
        .nth(1)
        .expect("README has a Layering section");
    let mut layers = std::collections::HashMap::new();
    for line in section.lines().take_while(|l| !l.starts_with('#')) {
        let Some((number, rest)) = line.split_once(". ") else {
            continue;
        };
        let Ok(level) = number.parse::<usize>() else {
            continue;
        };
        // The backticked names, without paths inside a module (`config::directives`).
        for name in rest.split('`').skip(1).step_by(2) {
            if !name.contains("::") {
                let name = name.trim_end_matches("/*");
                assert!(
                    layers.insert(name.to_owned(), level).is_none(),
                    "README lists `{name}` twice"
                );
            }
        }
    }
    layers
}

#[test]
fn the_readme_lists_the_layers_in_import_order() {
    let layers = readme_layers();
    // Every top-level module is listed.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).expect("read src/") {
        let name = entry.expect("directory entry").file_name();
        let name = name.to_string_lossy();
        let module = name.strip_suffix(".rs").unwrap_or(&name);
        if module != "lib" && module != "main" {
            assert!(
                layers.contains_key(module),
                "README's Layering does not list `{module}`"
            );
        }
    }
    // Every import between top-level modules goes down the list.
    let (_, report) = import_graph(None, &[]);
    let mut edges = 0;
    for line in report.lines() {
        let Some((from, rest)) = line.split_once(" -> ") else {
            continue;
        };
        let to = rest.split(' ').next().unwrap_or_default();
        if line.starts_with(' ') || from.contains("::") || to.contains("::") {
            continue;
        }
        edges += 1;
        let (a, b) = (layers[from], layers[to]);
        assert!(
            a < b,
            "README's Layering has `{from}` on line {a} and `{to}` on line {b}, but {from} \
             imports {to}: move a line, or the import"
        );
    }
    assert!(edges > 50, "{report}");
}

/// A directory under the system's temporary directory, removed when dropped.
struct TempTree(PathBuf);

impl TempTree {
    fn new(name: &str) -> TempTree {
        let dir =
            std::env::temp_dir().join(format!("podium-layering-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the tree's directory");
        TempTree(dir)
    }

    /// A tree of the given files (path relative to the tree, contents).
    fn with(name: &str, files: &[(&str, &str)]) -> TempTree {
        let tree = TempTree::new(name);
        for (path, text) in files {
            tree.write(path, text);
        }
        tree
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().expect("a file has a directory"))
            .expect("create a directory of the tree");
        std::fs::write(path, text).expect("write a file of the tree");
    }

    fn append(&self, path: &str, text: &str) {
        let path = self.0.join(path);
        let mut old = std::fs::read_to_string(&path).expect("read the file to plant in");
        old.push_str(text);
        std::fs::write(path, old).expect("plant the import");
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    for entry in std::fs::read_dir(from).expect("read the source tree") {
        let entry = entry.expect("directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a source file");
        }
    }
}

fn copy_of_the_sources(name: &str) -> TempTree {
    let copy = TempTree::new(name);
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &copy.0);
    copy
}

#[test]
fn an_upward_import_is_reported_as_a_cycle() {
    let copy = copy_of_the_sources("upward");
    // The keyspace (below the command table) reaching up into it.
    copy.write(
        "keyspace/upward.rs",
        "fn f() { let _ = crate::commands::lookup(b\"get\"); }\n",
    );
    let (ok, report) = import_graph(Some(&copy.0), &["--check"]);
    assert!(!ok, "the seeded cycle went unnoticed:\n{report}");
    assert!(
        report.contains("cycle: ") && report.contains("keyspace"),
        "{report}"
    );
}

#[test]
fn a_cycle_planted_inside_a_folder_is_reported() {
    let copy = copy_of_the_sources("inside");
    // The skip list uses its arena; the arena naming the skip list closes a circle of two
    // files of src/types/, invisible between top-level modules.
    copy.append(
        "types/arena.rs",
        "\nfn planted() -> usize {\n    std::mem::size_of::<super::skiplist::SkipList>()\n}\n",
    );
    let (ok, report) = import_graph(Some(&copy.0), &["--check"]);
    assert!(!ok, "the planted cycle went unnoticed:\n{report}");
    assert!(
        report.contains("cycle: types::arena types::skiplist"),
        "{report}"
    );
    assert!(
        report.contains("types::arena -> types::skiplist"),
        "{report}"
    );

    // The same, one folder deeper and through a `use` line.
    let copy = copy_of_the_sources("deeper");
    copy.append(
        "commands/scripting/convert.rs",
        "\n#[allow(unused_imports)]\nuse crate::commands::scripting::engine::Engine;\n",
    );
    let (ok, report) = import_graph(Some(&copy.0), &["--check"]);
    assert!(!ok, "the planted cycle went unnoticed:\n{report}");
    assert!(
        report.contains("commands::scripting::convert -> commands::scripting::engine"),
        "{report}"
    );
}

/// The cycles `import-graph.sh --check` reports for a tree, or None when it passes.
fn cycles_of(tree: &TempTree) -> Option<Vec<String>> {
    let (ok, report) = import_graph(Some(&tree.0), &["--check"]);
    if ok {
        assert!(report.contains("no cycles"), "{report}");
        return None;
    }
    Some(
        report
            .lines()
            .filter_map(|l| l.strip_prefix("cycle: "))
            .map(str::to_owned)
            .collect(),
    )
}

const LIB: &str = "pub mod a;\n";
const A_MOD: &str = "mod x;\nmod y;\nmod b;\nuse self::y::Helper;\n";
const A_X: &str = "use super::Helper;\npub struct Thing;\npub fn other() {}\n";
const A_B: &str = "pub mod c;\n";

#[test]
fn a_name_imported_by_the_folders_root_counts_as_its_origin() {
    // x names `super::Helper`, which a/mod.rs imports from y: x depends on y. y naming x in a
    // `use` tree spread over lines closes the circle.
    let tree = TempTree::with(
        "root-import",
        &[
            ("lib.rs", LIB),
            ("a/mod.rs", A_MOD),
            ("a/x.rs", A_X),
            (
                "a/y.rs",
                "use crate::a::{\n    x::{other as o, Thing},\n};\npub struct Helper;\n",
            ),
        ],
    );
    assert_eq!(cycles_of(&tree), Some(vec!["a::x a::y".to_owned()]));
}

#[test]
fn comments_strings_and_re_exports_are_not_references() {
    let tree = TempTree::with(
        "not-references",
        &[
            ("lib.rs", LIB),
            ("a/mod.rs", A_MOD),
            ("a/x.rs", A_X),
            (
                "a/y.rs",
                "//! Unlike super::x::Thing, this is no reference.\n\
                 pub(crate) use super::x::other;\n\
                 pub struct Helper;\n\
                 fn f() -> &'static str {\n    \"crate::a::x::Thing\" // super::x::other()\n}\n",
            ),
        ],
    );
    assert_eq!(cycles_of(&tree), None);

    // A path through y's re-export lands in x, where the item lives.
    tree.write("a/b/c.rs", "fn g() { crate::a::y::other() }\n");
    tree.write("a/b/mod.rs", A_B);
    tree.append("a/x.rs", "fn h() { let _ = crate::a::b::c::g; }\n");
    assert_eq!(cycles_of(&tree), Some(vec!["a::b a::x".to_owned()]));
}

#[test]
fn an_inline_module_resolves_super_from_itself() {
    // `super::super::x` inside y's test module is a::x, and test code counts.
    let tree = TempTree::with(
        "inline",
        &[
            ("lib.rs", LIB),
            ("a/mod.rs", A_MOD),
            ("a/x.rs", A_X),
            (
                "a/y.rs",
                "pub struct Helper;\n\n#[cfg(test)]\nmod tests {\n    use super::super::x::Thing;\n}\n",
            ),
        ],
    );
    assert_eq!(cycles_of(&tree), Some(vec!["a::x a::y".to_owned()]));
}

#[test]
fn a_reference_counts_where_the_two_paths_part() {
    // a/b/c.rs naming a/x.rs is an edge between a::b and a::x; with x naming c back, the
    // circle is between those two, not inside a/b.
    let tree = TempTree::with(
        "depth",
        &[
            ("lib.rs", LIB),
            ("a/mod.rs", "mod x;\nmod b;\n"),
            ("a/x.rs", "pub fn f() { crate::a::b::c::g() }\n"),
            ("a/b/mod.rs", A_B),
            ("a/b/c.rs", "pub fn g() {}\n"),
        ],
    );
    assert_eq!(cycles_of(&tree), None);
    let (_, report) = import_graph(Some(&tree.0), &[]);
    assert!(report.contains("a::x -> a::b (1 references)"), "{report}");
    let (_, why) = import_graph(Some(&tree.0), &["--why", "a::x", "a::b"]);
    assert_eq!(why.trim(), "a/x.rs:1");

    tree.write(
        "a/b/c.rs",
        "pub fn g() {}\nfn back() { super::super::x::f() }\n",
    );
    assert_eq!(cycles_of(&tree), Some(vec!["a::b a::x".to_owned()]));
}
