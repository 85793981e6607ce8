//! Dev-only helpers: seeded generators of Arrow data with nulls at every
//! level, empty lists and strings, all-null stretches and low-cardinality
//! strings, used by property tests across the workspace.

pub mod generate;

/// The Python interpreter to run pylance oracle scripts with
/// (`FATHOM_PYTHON`, default `python3`), or `None` when pylance is not
/// installed — which fails the test if `FATHOM_REQUIRE_PYLANCE` is set
/// (as CI sets it), so an oracle is never skipped silently there.
pub fn pylance_python() -> Option<String> {
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    let found = std::process::Command::new(&py)
        .args(["-c", "import lance"])
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(py);
    }
    assert!(
        std::env::var("FATHOM_REQUIRE_PYLANCE").is_err(),
        "FATHOM_REQUIRE_PYLANCE is set but `{py} -c 'import lance'` fails: pip install -r requirements-interop.txt"
    );
    eprintln!("SKIPPED: pylance not installed");
    None
}
