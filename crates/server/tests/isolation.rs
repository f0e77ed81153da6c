//! Tenant isolation over every route the server documents (issue 20): tenant `acme`
//! keeps a secret in a document, a memory, a job and a run; tenant `globex` then calls
//! every operation of the OpenAPI document — read and write, aimed at acme's collection,
//! document, source, job, memory and run ids — from four threads at once while acme
//! keeps asking about its secret (so acme's answers are in the answer cache). Nothing
//! globex gets back may hold acme's secret, no call on one of acme's ids may succeed,
//! and acme's data must be whole afterwards. A route added to the server without a body
//! here fails the test, so new routes are covered as they come.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use serde_json::{json, Value};

/// What acme asks, over and over, and globex asks too.
const ACME_QUESTION: &str = "What is the vault code?";

/// What only acme's data holds.
const SECRETS: [&str; 2] = ["ZQX4471", "Kourou"];

/// Acme's ids, found through acme's own key.
struct Acme {
    job: String,
    doc: String,
    source: String,
    memory: String,
    run: String,
}

fn setup_acme(a: SocketAddr, key: &str) -> Acme {
    let r = req(
        a,
        "POST",
        "/v1/collections/vault/documents",
        Some(key),
        Some(&json!({"documents": [{"name": "vault", "title": "Vault",
            "text": "The acme vault code is ZQX4471. The vault sits in Kourou."}]})),
    );
    let job = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(wait_job(a, Some(key), &job)["state"], "indexed");
    let sources = req(a, "GET", "/v1/collections/vault/sources", Some(key), None).json();
    let source = sources["sources"][0]["id"].as_str().unwrap().to_string();
    let doc = sources["sources"][0]["documents"][0]
        .as_str()
        .unwrap()
        .to_string();
    let m = req(
        a,
        "POST",
        "/v1/memories",
        Some(key),
        Some(&json!({"text": "Acme's vault code is ZQX4471, kept in Kourou."})),
    );
    assert_eq!(m.status, 201, "{}", String::from_utf8_lossy(&m.body));
    let memory = m.json()["memory"]["id"].as_str().unwrap().to_string();
    let report = ask(a, key);
    assert!(
        report["answer"].to_string().contains("ZQX4471"),
        "acme's own ask must find its secret: {report}"
    );
    let run = report["run_id"].as_str().unwrap().to_string();
    Acme {
        job,
        doc,
        source,
        memory,
        run,
    }
}

fn ask(a: SocketAddr, key: &str) -> Value {
    let r = req(
        a,
        "POST",
        "/v1/ask",
        Some(key),
        Some(&json!({"question": ACME_QUESTION, "collection": "vault"})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// The request globex makes for one documented operation: its path with acme's ids
/// filled in, and its body (`None` for an operation this test does not know yet).
fn request_for(
    path: &str,
    op: &Value,
    acme: &Acme,
    schemas: &Value,
) -> Option<(String, Option<Value>)> {
    let enc = |s: &str| s.replace(':', "%3A").replace('/', "%2F");
    let mut url = path
        .replace("{name}", "vault")
        .replace("{source}", &enc(&acme.source))
        .replace("{ordinal}", "0")
        .replace("{run_id}", &acme.run);
    url = if url.starts_with("/v1/jobs/") {
        url.replace("{id}", &acme.job)
    } else if url.starts_with("/v1/memories/") {
        url.replace("{id}", &acme.memory)
    } else {
        url.replace("{id}", &acme.doc)
    };
    assert!(
        !url.contains('{'),
        "a path parameter this test does not fill: {path}"
    );
    let queries: Vec<String> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| match p["name"].as_str()? {
            "entity" => Some("entity=vault".to_string()),
            "query" => Some("query=vault%20code".to_string()),
            "status" => Some("status=all".to_string()),
            _ => None,
        })
        .collect();
    if !queries.is_empty() {
        url = format!("{url}?{}", queries.join("&"));
    }
    let Some(content) = op["requestBody"]["content"].as_object() else {
        return Some((url, None));
    };
    let schema = content
        .get("application/json")
        .and_then(|c| c["schema"]["$ref"].as_str())
        .and_then(|r| r.rsplit('/').next())
        .unwrap_or("");
    assert!(
        schemas.get(schema).is_some() || schema.is_empty(),
        "{path}: schema {schema} is not in the document"
    );
    // Acme's own question, word for word (never a secret in what globex sends: answers
    // and runs echo it), so a cache key missing the tenant would serve acme's answer.
    let q = ACME_QUESTION;
    let body = match schema {
        "AcaiRequest" => json!({"message": q}),
        "AskRequest" => json!({"question": q, "collection": "vault"}),
        "ChatRequest" => {
            json!({"model": "neuralcore/vault", "messages": [{"role": "user", "content": q}]})
        }
        "CreateCollection" => json!({"name": "vault"}),
        "TextUpload" => json!({"documents": [{"name": "probe", "text": "Globex probes."}]}),
        "UrlDocument" => json!({"url": "http://example.com/"}),
        "MemoryAdd" => json!({"text": "Globex probes the memory."}),
        "MemorySearch" => json!({"query": "vault code"}),
        "MemoryLinkReq" => json!({"kind": "RELATED_TO", "to": acme.memory}),
        "MemorySignalReq" => json!({"signal": "confirmed"}),
        "MarkRequest" => json!({"verdict": "bad"}),
        "SearchRequest" => json!({"query": "vault code", "collection": "vault"}),
        // A backup holds every tenant's data: only the default tenant's admin may.
        "BackupRequest" => json!({"name": "probe"}),
        _ => return None,
    };
    Some((url, Some(body)))
}

#[test]
fn no_documented_route_shows_one_tenant_anything_of_another_even_under_concurrency() {
    let mut made = HashMap::new();
    // No rate limit: acme asks without pause for as long as globex probes.
    let s = server(
        neuralcore_server::ServeOptions {
            rate_per_minute: 0,
            ..loopback()
        },
        |ks| made = acme_and_globex(ks),
    );
    let a = s.addr;
    let (acme_key, globex_key) = (made["acme"].clone(), made["globex"].clone());
    let acme = Arc::new(setup_acme(a, &acme_key));

    let doc = req(a, "GET", "/openapi.json", None, None).json();
    let schemas = doc["components"]["schemas"].clone();
    let mut ops: Vec<(String, String, Option<Value>)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some((url, body)) = request_for(path, op, &acme, &schemas) else {
                panic!("{method} {path}: a route this test has no request for; add one");
            };
            ops.push((method.to_uppercase(), url, body));
        }
    }
    assert!(ops.len() >= 40, "only {} operations documented", ops.len());

    // Acme keeps asking (and so filling the answer cache) while globex probes.
    let stop = Arc::new(AtomicBool::new(false));
    let asker = {
        let (stop, key) = (stop.clone(), acme_key.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                ask(a, &key);
                // The search globex sends too, so its results sit in the cache as well.
                let r = req(
                    a,
                    "POST",
                    "/v1/search",
                    Some(&key),
                    Some(&json!({"query": "vault code", "collection": "vault"})),
                );
                assert_eq!(r.status, 200);
                n += 1;
            }
            n
        })
    };
    let ops = Arc::new(ops);
    let probers: Vec<_> = (0..4)
        .map(|t| {
            let (ops, acme, key) = (ops.clone(), acme.clone(), globex_key.clone());
            std::thread::spawn(move || {
                let mut leaks = Vec::new();
                // Each thread walks the list from its own place: the same calls meet
                // in every order.
                for i in 0..ops.len() {
                    let (method, url, body) = &ops[(i + t * 7) % ops.len()];
                    let r = req(a, method, url, Some(&key), body.as_ref());
                    let text = String::from_utf8_lossy(&r.body).to_string();
                    let head = format!("{:?}", r.headers);
                    for secret in SECRETS {
                        if text.contains(secret) || head.contains(secret) {
                            leaks.push(format!("{method} {url}: {secret} in {}", r.status));
                        }
                    }
                    // On one of acme's own ids, nothing may succeed.
                    let source = acme.source.replace(':', "%3A");
                    let aimed = [&acme.job, &acme.doc, &acme.memory, &acme.run, &source]
                        .iter()
                        .any(|id| url.contains(id.as_str()))
                        || body
                            .as_ref()
                            .is_some_and(|b| b.to_string().contains(&acme.memory));
                    if aimed && (200..300).contains(&r.status) {
                        leaks.push(format!("{method} {url}: {} on acme's id: {text}", r.status));
                    }
                    assert_ne!(r.status, 500, "{method} {url}: {text}");
                }
                leaks
            })
        })
        .collect();
    let leaks: Vec<String> = probers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    assert!(asker.join().unwrap() > 0);
    assert!(
        leaks.is_empty(),
        "globex saw acme's data:\n{}",
        leaks.join("\n")
    );

    // Acme's data is whole: globex's deletes, forgets and signals touched only its own.
    let key = Some(acme_key.as_str());
    let c = req(a, "GET", "/v1/collections/vault", key, None);
    assert_eq!(c.status, 200);
    assert_eq!(c.json()["documents"], 1, "{}", c.json());
    let m = req(
        a,
        "GET",
        &format!("/v1/memories/{}", acme.memory),
        key,
        None,
    )
    .json();
    assert_eq!(m["memory"]["status"], "active", "{m}");
    let audit = req(
        a,
        "GET",
        &format!("/v1/memories/{}/audit", acme.memory),
        key,
        None,
    )
    .json();
    assert!(
        !audit.to_string().contains("confirmed"),
        "globex's signal reached acme's memory: {audit}"
    );
    let marks = req(a, "GET", "/v1/marks", key, None).json();
    assert_eq!(
        marks["marks"],
        json!([]),
        "globex marked acme's run: {marks}"
    );
    for path in [
        format!("/v1/jobs/{}", acme.job),
        format!("/v1/runs/{}", acme.run),
        format!("/v1/collections/vault/documents/{}", acme.doc),
    ] {
        assert_eq!(req(a, "GET", &path, key, None).status, 200, "{path}");
    }
    assert!(ask(a, &acme_key)["answer"].to_string().contains("ZQX4471"));
}
