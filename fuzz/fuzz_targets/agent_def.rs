//! An agent definition file's syntax (front matter, name, role, tools): the parser of
//! `crates/agents/src/def.rs`, compiled here alone (it needs nothing of the engine).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/agents/src/def.rs"]
#[allow(dead_code)]
mod def;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = std::path::Path::new("agents/fuzz.md");
    match def::parse_syntax(path, text) {
        Ok(d) => {
            assert!(!d.fm.tools.is_empty() && def::ROLES.contains(&d.fm.role.as_str()));
        }
        Err(e) => {
            // Every error names the file, and a line only within the text (YAML counts
            // a lone CR as a line break too, so both kinds bound it).
            assert_eq!(e.path, path);
            if let Some(l) = e.line {
                let breaks = text.matches(['\n', '\r']).count();
                assert!(l >= 1 && l <= breaks + 2, "{e}");
            }
        }
    }
});
