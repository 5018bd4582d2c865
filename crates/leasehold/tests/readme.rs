//! The project README and this crate's README show the same library
//! example; only the crate's is compiled as a doctest (the project README
//! is outside the packaged crate).

use std::path::Path;

fn rust_blocks(text: &str) -> Vec<&str> {
    text.split("```rust\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("\n```").map(|(block, _)| block))
        .collect()
}

#[test]
fn the_project_readme_example_is_the_tested_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(project) = std::fs::read_to_string(dir.join("../../README.md")) else {
        // Built from the packaged crate: there is no project README.
        return;
    };
    let tested = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert_eq!(rust_blocks(&project), rust_blocks(&tested));
    assert_eq!(rust_blocks(&tested).len(), 1);
}

#[test]
fn the_readme_example_is_the_readme_example_program() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tested = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let example = std::fs::read_to_string(dir.join("examples/readme.rs")).unwrap();
    // The program is the block, after its doc comment.
    let program: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(program.trim_end(), rust_blocks(&tested)[0].trim_end());
}
