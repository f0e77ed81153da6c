//! Declares every `src/tools/*.rs` file as a module, so a new tool is one new file in
//! that folder: no `mod` line or list to edit. (Each file registers its tool itself with
//! `register_tool!`.)

use std::fmt::Write;

fn main() {
    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/tools");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("src/tools exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && !p.ends_with("mod.rs"))
        .collect();
    files.sort();
    let mut out = String::new();
    for p in files {
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        let ident: String = stem
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        println!("cargo:rerun-if-changed={}", p.display());
        writeln!(
            out,
            "#[path = {:?}]\nmod tool_{ident};",
            p.display().to_string()
        )
        .unwrap();
    }
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("tools.rs");
    std::fs::write(dest, out).unwrap();
}
