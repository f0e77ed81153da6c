//! The Mind's key glob matcher: a pattern and a key, split at the first NUL.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pattern, key) = text.split_once('\0').unwrap_or((text, ""));
    let _ = neuralcore_mind::glob_match(pattern, key);
});
