//! The html loader, and chunking, on any bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| neuralcore_fuzz::load("html", data));
