//! An MCP message as the server reads it off the wire: the JSON-RPC envelope (rmcp's
//! client message types), then, for a tool call, its arguments into the tool's typed
//! arguments (`crates/mcp/src/args.rs`, compiled here alone), as the tool router does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use serde_json::Value;

#[path = "../../crates/mcp/src/args.rs"]
#[allow(dead_code)]
mod args;

fn typed<T: serde::de::DeserializeOwned>(v: Value) {
    let _ = serde_json::from_value::<T>(v);
}

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = serde_json::from_slice::<ClientJsonRpcMessage>(data) else {
        return;
    };
    let JsonRpcMessage::Request(r) = msg else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = r.request else {
        return;
    };
    let a = Value::Object(call.params.arguments.unwrap_or_default());
    match call.params.name.as_ref() {
        "search" => typed::<args::SearchArgs>(a),
        "ask" => typed::<args::AskArgs>(a),
        "ingest_text" => typed::<args::IngestTextArgs>(a),
        "ingest_url" => typed::<args::IngestUrlArgs>(a),
        "job_status" => typed::<args::JobArgs>(a),
        "memory_add" => typed::<args::MemoryAddArgs>(a),
        "memory_search" => typed::<args::MemorySearchArgs>(a),
        "memory_get" | "memory_forget" => typed::<args::MemoryIdArgs>(a),
        "memory_signal" => typed::<args::MemorySignalArgs>(a),
        "memory_link" => typed::<args::MemoryLinkArgs>(a),
        "memory_tiers" => typed::<args::TiersArgs>(a),
        "memory_graph" => typed::<args::GraphArgs>(a),
        _ => {}
    }
});
