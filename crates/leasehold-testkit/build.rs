//! Lists the conformance suite's tests for `conformance_tests!`: every
//! `pub async fn` in `src/conformance/*.rs` (but `mod.rs`) is a test, so a
//! test is registered by declaring it; those in `loss.rs` take the
//! store-loss function too; those in `mixed.rs` are not registered (each
//! backend's store-loss tests call them with the handles they need). Written by
//! hand (a few lines of scanning)
//! rather than with a proc-macro or `inventory`: the macro needs the names
//! at compile time, one `#[tokio::test]` each.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

fn main() {
    let dir = Path::new("src/conformance");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut each = BTreeSet::new();
    let mut lose = BTreeSet::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("src/conformance")
        .map(|e| e.expect("src/conformance entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n != "mod.rs" && n != "mixed.rs")
        })
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a conformance file");
        let is_loss = file.file_stem().is_some_and(|s| s == "loss");
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("pub async fn ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let fresh = if is_loss {
                lose.insert(name.clone())
            } else {
                each.insert(name.clone())
            };
            assert!(
                fresh && !(each.contains(&name) && lose.contains(&name)),
                "conformance test {name} is declared twice"
            );
        }
    }
    assert!(!each.is_empty(), "no conformance tests found");
    let list = |names: &BTreeSet<String>| names.iter().cloned().collect::<Vec<_>>().join(", ");
    let mut out = String::new();
    writeln!(
        out,
        "#[doc(hidden)]\n#[macro_export]\nmacro_rules! __leasehold_conformance_list {{\n    \
         (each $factory:path) => {{ $crate::conformance_tests!(@each $factory; {}); }};\n    \
         (lose $factory:path, $lose:path) => {{ $crate::conformance_tests!(@lose $factory, $lose; {}); }};\n}}",
        list(&each),
        list(&lose)
    )
    .unwrap();
    let path = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("conformance_list.rs");
    std::fs::write(path, out).expect("writing the conformance list");
}
