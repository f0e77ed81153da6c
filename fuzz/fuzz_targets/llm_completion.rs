//! A chat-completion answer body, as an OpenAI-compatible server might send it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| neuralcore_llm::fuzzing::completion(data));
