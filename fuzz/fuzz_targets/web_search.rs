//! A SearxNG JSON answer, and its results' text cut into passages.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| neuralcore_web::fuzzing::search_answer(data));
