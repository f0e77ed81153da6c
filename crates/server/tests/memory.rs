//! Memory over HTTP: every route for the caller's tenant, and nothing of another tenant's
//! memories through any of them.

mod common;

use std::collections::HashMap;

use common::*;
use neuralcore_app::Scope;
use serde_json::{json, Value};

#[test]
fn memory_routes_work_for_their_tenant_and_hide_every_other() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| {
        made = acme_and_globex(ks);
        let (k, _) = ks.create_key("acme", Scope::Read, "").unwrap();
        made.insert("acme-read".into(), k);
    });
    let a = s.addr;
    let (acme, globex) = (made["acme"].as_str(), made["globex"].as_str());
    let add = |key: &str, body: Value| {
        let r = req(a, "POST", "/v1/memories", Some(key), Some(&body));
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        r.json()
    };
    let old = add(
        acme,
        json!({"text": "Alice decided the launch window opens on March 9.", "kind": "decision", "project": "rocket"}),
    );
    let new = add(
        acme,
        json!({"text": "Alice moved the launch window to March 12 after the storm.", "kind": "decision", "project": "rocket", "metadata": {"speaker": "Alice"}}),
    );
    let secret = add(
        globex,
        json!({"text": "Alice at Globex keeps the volcano lair code 4711.", "kind": "fact"}),
    );
    let (old_id, new_id, secret_id) = (
        old["memory"]["id"].as_str().unwrap().to_string(),
        new["memory"]["id"].as_str().unwrap().to_string(),
        secret["memory"]["id"].as_str().unwrap().to_string(),
    );
    assert_eq!(new["memory"]["scope"]["tenant"], "acme");
    assert!(new["memory"]["embedding"].is_null(), "{new}");
    assert!(new["entities"].to_string().contains("Alice"), "{new}");
    // A read key cannot change memories.
    req(
        a,
        "POST",
        "/v1/memories",
        Some(&made["acme-read"]),
        Some(&json!({"text": "x"})),
    )
    .problem(403, "forbidden");

    // List, search, get.
    let list = req(a, "GET", "/v1/memories?project=rocket", Some(acme), None).json();
    assert_eq!(list["memories"].as_array().unwrap().len(), 2, "{list}");
    let hits = req(
        a,
        "POST",
        "/v1/memories/search",
        Some(acme),
        Some(&json!({"query": "when does the launch window open", "k": 5})),
    )
    .json();
    assert!(!hits["hits"].as_array().unwrap().is_empty(), "{hits}");
    let got = req(
        a,
        "GET",
        &format!("/v1/memories/{new_id}"),
        Some(acme),
        None,
    )
    .json();
    assert_eq!(got["memory"]["id"], new_id.as_str());

    // Link, signal, forget, restore, audit.
    let r = req(
        a,
        "POST",
        &format!("/v1/memories/{new_id}/links"),
        Some(acme),
        Some(&json!({"kind": "SUPERSEDES", "to": old_id})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let before = got["memory"]["trust"].as_f64().unwrap();
    let m = req(
        a,
        "POST",
        &format!("/v1/memories/{new_id}/signal"),
        Some(acme),
        Some(&json!({"signal": "confirmed"})),
    )
    .json();
    assert!(m["trust"].as_f64().unwrap() > before, "{m}");
    let m = req(
        a,
        "POST",
        &format!("/v1/memories/{old_id}/forget"),
        Some(acme),
        None,
    )
    .json();
    assert_eq!(m["status"], "archived");
    let m = req(
        a,
        "POST",
        &format!("/v1/memories/{old_id}/restore"),
        Some(acme),
        None,
    )
    .json();
    assert_eq!(m["status"], "active");
    let audit = req(
        a,
        "GET",
        &format!("/v1/memories/{new_id}/audit"),
        Some(acme),
        None,
    )
    .json();
    assert!(audit["audit"].as_array().unwrap().len() >= 2, "{audit}");
    let tiers = req(
        a,
        "GET",
        "/v1/memory/tiers?project=rocket&query=launch%20window",
        Some(acme),
        None,
    );
    assert_eq!(
        tiers.status,
        200,
        "{}",
        String::from_utf8_lossy(&tiers.body)
    );
    let graph = req(a, "GET", "/v1/memory/graph?entity=Alice", Some(acme), None).json();
    let text = graph.to_string();
    assert!(text.contains(&new_id), "{text}");

    // Bad input.
    for (method, path, body) in [
        ("POST", "/v1/memories", Some(json!({"text": "  "}))),
        (
            "POST",
            "/v1/memories",
            Some(json!({"text": "x", "kind": "gossip"})),
        ),
        (
            "POST",
            "/v1/memories",
            Some(json!({"text": "x", "colour": 1})),
        ),
        ("POST", "/v1/memories/search", Some(json!({"query": ""}))),
        ("GET", "/v1/memories?status=lost", None),
        ("GET", "/v1/memory/graph", None),
        ("GET", "/v1/memory/graph?entity=Alice&kind=planet", None),
    ] {
        req(a, method, path, Some(acme), body.as_ref()).problem(400, "invalid_input");
    }
    let r = req(
        a,
        "POST",
        &format!("/v1/memories/{new_id}/signal"),
        Some(acme),
        Some(&json!({"signal": "liked"})),
    );
    r.problem(400, "invalid_input");

    // Globex sees none of acme's memories, and acme none of globex's, on any route.
    for (key, theirs) in [(globex, &new_id), (acme, &secret_id)] {
        for (method, path, body) in [
            ("GET", format!("/v1/memories/{theirs}"), None),
            ("GET", format!("/v1/memories/{theirs}/audit"), None),
            ("POST", format!("/v1/memories/{theirs}/forget"), None),
            ("POST", format!("/v1/memories/{theirs}/restore"), None),
            (
                "POST",
                format!("/v1/memories/{theirs}/signal"),
                Some(json!({"signal": "ignored"})),
            ),
        ] {
            req(a, method, &path, Some(key), body.as_ref()).problem(404, "not_found");
        }
    }
    // A link to another tenant's memory is refused as not found.
    req(
        a,
        "POST",
        &format!("/v1/memories/{new_id}/links"),
        Some(acme),
        Some(&json!({"kind": "RELATED_TO", "to": secret_id})),
    )
    .problem(404, "not_found");
    for (key, word) in [(globex, "launch"), (acme, "4711")] {
        for (method, path, body) in [
            ("GET", "/v1/memories?status=all", None),
            (
                "POST",
                "/v1/memories/search",
                Some(json!({"query": "Alice launch window volcano lair code", "k": 50})),
            ),
            (
                "GET",
                "/v1/memory/tiers?query=Alice%20launch%20volcano",
                None,
            ),
            ("GET", "/v1/memory/graph?entity=Alice", None),
        ] {
            let r = req(a, method, path, Some(key), body.as_ref());
            assert_eq!(r.status, 200, "{path}");
            let text = String::from_utf8_lossy(&r.body);
            assert!(!text.contains(word), "{path} leaks {word}: {text}");
        }
    }
}

/// `GET /v1/feedback` (issue 16): a signal's question becomes a training pair of that
/// tenant only; a question too long is a 400 that records nothing; no key is a 401.
#[test]
fn feedback_gives_each_tenant_its_own_signals_as_pairs() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| made = acme_and_globex(ks));
    let a = s.addr;
    let (acme, globex) = (made["acme"].as_str(), made["globex"].as_str());
    let add = |key: &str, text: &str| {
        let r = req(
            a,
            "POST",
            "/v1/memories",
            Some(key),
            Some(&json!({"text": text})),
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        r.json()["memory"]["id"].as_str().unwrap().to_string()
    };
    let signal = |key: &str, id: &str, body: Value| {
        req(
            a,
            "POST",
            &format!("/v1/memories/{id}/signal"),
            Some(key),
            Some(&body),
        )
    };
    let mine = add(acme, "The acme deploy runs on Fridays.");
    let theirs = add(globex, "Globex keeps the lair code 4711.");
    let q = "When does the deploy run?";
    assert_eq!(
        signal(acme, &mine, json!({"signal": "confirmed", "query": q})).status,
        200
    );
    assert_eq!(
        signal(globex, &theirs, json!({"signal": "corrected", "query": q})).status,
        200
    );
    let long = "q".repeat(16 * 1024 + 1);
    let r = signal(acme, &mine, json!({"signal": "used", "query": long}));
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let r = signal(acme, &mine, json!({"signal": "used", "query": 7}));
    assert_eq!(r.status, 400);

    let f = req(a, "GET", "/v1/feedback", Some(acme), None);
    assert_eq!(f.status, 200);
    let f = f.json();
    assert_eq!(f["pairs"].as_array().unwrap().len(), 1, "{f}");
    assert_eq!(f["pairs"][0]["question"], q);
    assert_eq!(f["pairs"][0]["passage"], "The acme deploy runs on Fridays.");
    assert_eq!(f["pairs"][0]["label"], 1.0);
    assert!(!f.to_string().contains("4711"), "{f}");
    let g = req(a, "GET", "/v1/feedback", Some(globex), None).json();
    assert_eq!(g["pairs"][0]["label"], 0.0, "{g}");
    assert!(!g.to_string().contains("Fridays"), "{g}");
    assert_eq!(req(a, "GET", "/v1/feedback", None, None).status, 401);
}
