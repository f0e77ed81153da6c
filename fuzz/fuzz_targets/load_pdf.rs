//! The PDF loader, and chunking, on any bytes.
//!
//! `pdf-extract` panics on many malformed files; the loader runs it on a thread named
//! `pdf-extract` under `catch_unwind` and turns a panic into a parse error (tested in
//! crates/ingest). libFuzzer's panic hook aborts on every panic, so here a panic on that
//! thread goes back to the default hook (and is caught); a panic anywhere else still
//! aborts and is a finding.
#![no_main]

use std::sync::Once;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some("pdf-extract") {
                fuzzer_hook(info);
            }
        }));
    });
    neuralcore_fuzz::load("pdf", data);
});
