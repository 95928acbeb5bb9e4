//! The module layering as a test: runs tests/layering/import-graph.sh, which lists the
//! dependencies between the crate's top-level modules (re-export lines left out) and reports
//! cycles. The crate has none (see the README's "Layering"): a module that imports one above
//! it fails this test. A second test seeds an upward import in a copy of the sources and
//! checks the script catches it, so the first cannot pass by the script seeing nothing.

use std::path::Path;
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
    // The graph is not empty: the script did read the sources.
    assert!(report.contains("commands -> keyspace"), "{report}");
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

#[test]
fn an_upward_import_is_reported_as_a_cycle() {
    let copy = std::env::temp_dir().join(format!("podium-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &copy);
    // The keyspace (below the command table) reaching up into it.
    std::fs::write(
        copy.join("keyspace").join("upward.rs"),
        "fn f() { let _ = crate::commands::lookup(b\"get\"); }\n",
    )
    .expect("seed the upward import");
    let (ok, report) = import_graph(Some(&copy), &["--check"]);
    let _ = std::fs::remove_dir_all(&copy);
    assert!(!ok, "the seeded cycle went unnoticed:\n{report}");
    assert!(
        report.contains("cycle: ") && report.contains("keyspace"),
        "{report}"
    );
}
