//! A streamed completion: server-sent events cut into pieces anywhere (the first bytes
//! choose the cuts), each event's data read as a stream chunk.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (cuts, body) = data.split_at(data.len().min(8));
    let cuts: Vec<usize> = cuts.iter().map(|&b| b as usize * 7).collect();
    neuralcore_llm::fuzzing::stream(body, &cuts);
});
