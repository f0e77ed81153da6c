//! The config loader: a `neuralcore.toml`, then `NEURALCORE_*` overrides (the input's
//! lines after a NUL byte, `SECTION_KEY=value` each), parsed and validated. A config
//! that loads must show (`config show`: passwords hidden) as TOML that loads again and
//! shows the same: what `config show` prints can be saved and used.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neuralcore_config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (file, env) = text.split_once('\0').unwrap_or((text, ""));
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (format!("NEURALCORE_{k}"), v.to_string()))
        .collect();
    let path = std::path::Path::new("fuzz/neuralcore.toml");
    match Config::parse(Some(file), Some(path), env) {
        Ok(cfg) => {
            let shown = cfg.to_toml();
            let again = Config::parse(Some(&shown), None, Vec::new())
                .unwrap_or_else(|e| panic!("the shown config does not load: {e}\n{shown}"));
            assert_eq!(again.to_toml(), shown);
        }
        Err(e) => assert!(!e.0.is_empty()),
    }
});
