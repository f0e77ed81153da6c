//! The HTTP API end to end: a real server on 127.0.0.1 over a real data dir and the real
//! embedding model, spoken to over raw TCP (so malformed requests and clients that go
//! away can be sent as such).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use neuralcore_app::Scope;
use neuralcore_server::ServeOptions;
use serde_json::{json, Value};

#[test]
fn without_keys_the_default_tenant_searches_and_asks() {
    let s = server(loopback(), |_| {});
    let a = s.addr;
    let r = req(a, "GET", "/healthz", None, None);
    assert_eq!((r.status, r.json()["status"].clone()), (200, json!("ok")));
    let r = req(a, "GET", "/readyz", None, None);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["checks"]["embedding_model"], "loaded");

    // Collections: the default tenant's only.
    let r = req(a, "GET", "/v1/collections", None, None);
    let names: Vec<Value> = r.json()["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, [json!("docs")]);
    let r = req(
        a,
        "POST",
        "/v1/collections",
        None,
        Some(&json!({"name": "notes"})),
    );
    assert_eq!(r.status, 201);
    assert_eq!(
        req(
            a,
            "POST",
            "/v1/collections",
            None,
            Some(&json!({"name": "notes"}))
        )
        .status,
        200
    );
    assert_eq!(
        req(a, "GET", "/v1/collections/notes", None, None).json()["documents"],
        0
    );
    assert_eq!(
        req(a, "DELETE", "/v1/collections/notes", None, None).status,
        204
    );
    req(a, "GET", "/v1/collections/notes", None, None).problem(404, "not_found");

    // Search: the versioned response with provenance.
    let r = req(
        a,
        "POST",
        "/v1/search",
        None,
        Some(&json!({"query": "rocket launch Kourou", "collection": "docs", "k": 3})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["schema"], "neuralcore.search/v1");
    assert!(v["hits"][0]["text"].as_str().unwrap().contains("Kourou"));
    assert!(v["hits"][0]["path"].as_str().unwrap().ends_with(".md"));

    // Ask: the ask report, the same schema as `ask --json`.
    let r = req(
        a,
        "POST",
        "/v1/ask",
        None,
        Some(&json!({"question": "When does the acme rocket launch?", "collection": "docs"})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["schema"], "neuralcore.ask/v1");
    assert!(
        v["answer"].as_str().unwrap().contains("ninth of March"),
        "{v}"
    );
    assert_eq!(v["collection"], "docs");
}

/// Reads an SSE stream until `done`: (event name, data) pairs, and when the first
/// event arrived after the request was written.
fn sse(addr: SocketAddr, body: &Value) -> (Vec<(String, Value)>, Duration) {
    let body = body.to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "POST /v1/ask HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let sent = Instant::now();
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    assert!(headers["content-type"].starts_with("text/event-stream"));
    let mut first = None;
    let mut events = Vec::new();
    let (mut name, mut data) = (String::new(), String::new());
    let mut line = String::new();
    while r.read_line(&mut line).unwrap() > 0 {
        let l = line.trim_end().to_string();
        line.clear();
        if let Some(n) = l.strip_prefix("event: ") {
            first.get_or_insert_with(|| sent.elapsed());
            name = n.to_string();
        } else if let Some(d) = l.strip_prefix("data: ") {
            data.push_str(d);
        } else if l.is_empty() && !name.is_empty() {
            let v: Value = serde_json::from_str(&data).unwrap();
            let done = name == "done";
            events.push((std::mem::take(&mut name), v));
            data.clear();
            if done {
                break;
            }
        }
    }
    (events, first.unwrap())
}

#[test]
fn the_ask_stream_is_versioned_and_ends_in_done() {
    let s = server(loopback(), |_| {});
    let (events, first) = sse(
        s.addr,
        &json!({"question": "When does the acme rocket launch?", "collection": "docs"}),
    );
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names.first(), Some(&"accepted"));
    assert_eq!(&names[names.len() - 2..], ["report", "done"], "{names:?}");
    for (i, (name, v)) in events.iter().enumerate() {
        assert_eq!(v["schema"], "neuralcore.events/v1");
        assert_eq!(v["seq"], i);
        assert_eq!(v["kind"], *name);
    }
    let report = &events[names.len() - 2].1["report"];
    assert!(report["answer"]
        .as_str()
        .unwrap()
        .contains("ninth of March"));
    eprintln!("first event after {first:?}");
    // Between them, the loop's own events, as `ask --trace` prints them: in the
    // loop's order, the answer last, saying what the report says.
    let at = |kind: &str| {
        names
            .iter()
            .position(|n| *n == kind)
            .unwrap_or_else(|| panic!("no {kind} in {names:?}"))
    };
    for (a, b) in [
        ("accepted", "observe"),
        ("observe", "decision"),
        ("decision", "plan"),
        ("plan", "sub_query"),
        ("sub_query", "retrieved"),
        ("retrieved", "verdict"),
        ("verdict", "refined"),
        ("refined", "stopped"),
        ("stopped", "answer"),
    ] {
        assert!(at(a) < at(b), "{a} before {b}: {names:?}");
    }
    assert_eq!(names[names.len() - 3], "answer", "{names:?}");
    let answer = &events[names.len() - 3].1;
    assert_eq!(answer["answer"], report["answer"]);
    assert_eq!(answer["citations"], report["citations"]);
    let verdicts = events.iter().filter(|e| e.0 == "verdict").count();
    assert_eq!(verdicts, report["verdicts"].as_array().unwrap().len());
    for (name, v) in &events {
        if name == "verdict" {
            assert!(v["graded"]["score"].is_number() && v["graded"]["reason"].is_string());
        }
        if name == "retrieved" {
            assert_eq!(v["hits"][0]["evidence"]["kind"], "chunk", "{v}");
        }
    }

    // An error is an event too, then done.
    let (events, _) = sse(s.addr, &json!({"question": "x", "collection": "nope"}));
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["accepted", "error", "done"]);
    assert_eq!(events[1].1["type"], "urn:neuralcore:problem:not_found");
}

#[test]
fn keys_keep_tenants_apart_on_every_route() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| {
        for t in ["acme", "globex"] {
            ks.create_tenant(t).unwrap();
            for scope in [Scope::Read, Scope::Write] {
                let (k, _) = ks.create_key(t, scope, "").unwrap();
                made.insert(format!("{t}-{}", scope.name()), k);
            }
        }
        let (k, rec) = ks.create_key("acme", Scope::Read, "gone").unwrap();
        ks.revoke(&rec.prefix).unwrap();
        made.insert("revoked".into(), k);
    });
    let a = s.addr;
    let key = |n: &str| made[n].clone();

    // No key, a malformed one, a revoked one: 401 alike; health needs none.
    assert_eq!(req(a, "GET", "/healthz", None, None).status, 200);
    for k in [
        None,
        Some("nope"),
        Some("nck_0_0"),
        Some(key("revoked").as_str()),
    ] {
        let r = req(a, "GET", "/v1/collections", k, None);
        r.problem(401, "unauthorized");
        assert_eq!(
            r.headers.get("www-authenticate").map(String::as_str),
            Some("Bearer")
        );
    }
    // X-API-Key works as well as Bearer.
    let r = raw(
        a,
        format!(
            "GET /v1/collections HTTP/1.1\r\nHost: x\r\nX-API-Key: {}\r\nConnection: close\r\n\r\n",
            key("acme-read")
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 200);

    // Each tenant sees its own `docs` and nothing else, through every route.
    for (mine, theirs, word) in [("acme", "globex", "Kourou"), ("globex", "acme", "volcano")] {
        let k = key(&format!("{mine}-write"));
        let cols = req(a, "GET", "/v1/collections", Some(&k), None).json();
        assert_eq!(cols["collections"].as_array().unwrap().len(), 1, "{cols}");
        let text = cols.to_string();
        assert!(!text.contains(theirs) && !text.contains('~'), "{text}");
        let hits = req(a, "POST", "/v1/search", Some(&k), Some(&json!({"query": "rocket launch volcano lair Kourou Cyprus", "collection": "docs", "k": 10}))).json();
        let text = hits["hits"].to_string();
        assert!(text.contains(word), "{text}");
        let other = if word == "Kourou" {
            "volcano"
        } else {
            "Kourou"
        };
        assert!(!text.contains(other), "{text}");
        // The other tenant's stored name is no name at all; the default tenant's
        // collection is not theirs.
        req(
            a,
            "GET",
            &format!("/v1/collections/{theirs}~docs"),
            Some(&k),
            None,
        )
        .problem(400, "invalid_input");
        let r = req(
            a,
            "POST",
            "/v1/search",
            Some(&k),
            Some(&json!({"query": "x", "collection": "nope"})),
        );
        let v = r.problem(404, "not_found");
        assert!(!v.to_string().contains(theirs), "{v}");
        let report = req(a, "POST", "/v1/ask", Some(&k), Some(&json!({"question": "When does the acme rocket launch, and where is the volcano lair?", "collection": "docs"}))).json();
        // The evidence it graded and cited is the tenant's own documents.
        let own: &[&str] = if mine == "acme" {
            &["Launch", "Press"]
        } else {
            &["Plan"]
        };
        for item in report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .chain(report["citations"].as_array().unwrap())
        {
            assert!(own.contains(&item["title"].as_str().unwrap()), "{item}");
        }
    }
    // A read key cannot write; a write key of one tenant cannot delete another's.
    req(
        a,
        "POST",
        "/v1/collections",
        Some(&key("acme-read")),
        Some(&json!({"name": "x"})),
    )
    .problem(403, "forbidden");
    req(
        a,
        "DELETE",
        "/v1/collections/docs",
        Some(&key("acme-read")),
        None,
    )
    .problem(403, "forbidden");
    assert_eq!(
        req(
            a,
            "POST",
            "/v1/collections",
            Some(&key("globex-write")),
            Some(&json!({"name": "tmp"}))
        )
        .status,
        201
    );
    req(
        a,
        "DELETE",
        "/v1/collections/tmp",
        Some(&key("acme-write")),
        None,
    )
    .problem(404, "not_found");
    assert_eq!(
        req(
            a,
            "DELETE",
            "/v1/collections/tmp",
            Some(&key("globex-write")),
            None
        )
        .status,
        204
    );
}

#[test]
fn bad_requests_get_problems_not_crashes() {
    let s = server(
        ServeOptions {
            max_body_bytes: 64 * 1024,
            ..loopback()
        },
        |_| {},
    );
    let a = s.addr;
    let post = |path: &str, ctype: &str, body: &[u8]| {
        let mut r = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        raw(a, &r)
    };
    let json = "application/json";
    post("/v1/search", json, b"{\"query\": ").problem(400, "invalid_input");
    post("/v1/search", json, b"{\"query\": 5}").problem(400, "invalid_input");
    post(
        "/v1/search",
        json,
        b"{\"query\": \"x\", \"colour\": \"red\"}",
    )
    .problem(400, "invalid_input");
    post("/v1/search", json, b"[1, 2]").problem(400, "invalid_input");
    post("/v1/search", json, b"{\"query\": \"\xff\xfe\"}").problem(400, "invalid_input");
    post("/v1/search", "text/plain", b"{\"query\": \"x\"}").problem(415, "unsupported_media_type");
    post("/v1/search", json, br#"{"query": "x", "k": 0}"#).problem(400, "invalid_input");
    post("/v1/search", json, br#"{"query": "x", "mode": "psychic"}"#).problem(400, "invalid_input");
    post("/v1/search", json, br#"{"query": "   "}"#).problem(400, "invalid_input");
    let big = format!("{{\"query\": \"{}\"}}", "a".repeat(100 * 1024));
    post("/v1/search", json, big.as_bytes()).problem(413, "payload_too_large");
    post("/v1/ask", json, br#"{"question": ""}"#).problem(400, "invalid_input");
    // Only white space, as JSON Schema's validators read it; a deadline past int64.
    let v =
        post("/v1/ask", json, br#"{"question": "\u001c\ufeff "}"#).problem(400, "invalid_input");
    assert!(v["detail"].as_str().unwrap().contains("empty"), "{v}");
    post(
        "/v1/ask",
        json,
        br#"{"question": "0", "deadline_ms": 9223372036854775808}"#,
    )
    .problem(400, "invalid_input");
    let long = format!("{{\"question\": \"{}\"}}", "why ".repeat(5_000));
    let v = post("/v1/ask", json, long.as_bytes()).problem(400, "invalid_input");
    assert!(v["detail"].as_str().unwrap().contains("longest"), "{v}");
    post("/v1/collections", json, br#"{"name": "../etc"}"#).problem(400, "invalid_input");
    post("/v1/collections", json, br#"{"name": "a/b"}"#).problem(400, "invalid_input");
    req(a, "GET", "/v1/collections/..%2F..%2Fetc", None, None).problem(400, "invalid_input");
    req(a, "GET", "/v1/nothing", None, None).problem(404, "not_found");
    req(a, "PUT", "/v1/search", None, None).problem(405, "method_not_allowed");
    // No problem carries a path of the server's disk.
    let r = post(
        "/v1/search",
        json,
        br#"{"query": "x", "collection": "nope"}"#,
    );
    assert!(!String::from_utf8_lossy(&r.body).contains("/tmp"));
    // Still healthy after all that.
    assert_eq!(req(a, "GET", "/healthz", None, None).status, 200);
}

#[test]
fn a_client_that_goes_away_mid_stream_leaves_the_server_healthy() {
    let s = server(loopback(), |_| {});
    for _ in 0..3 {
        let body = json!({"question": "When does the acme rocket launch?", "collection": "docs"})
            .to_string();
        let mut c = TcpStream::connect(s.addr).unwrap();
        write!(
            c,
            "POST /v1/ask HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut first = [0u8; 64];
        let _ = c.read(&mut first);
        drop(c);
    }
    // A client that sends half a request and stops.
    let mut slow = TcpStream::connect(s.addr).unwrap();
    slow.write_all(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"qu")
        .unwrap();
    let r = req(
        s.addr,
        "POST",
        "/v1/search",
        None,
        Some(&json!({"query": "rocket", "collection": "docs"})),
    );
    assert_eq!(r.status, 200);
    drop(slow);
}

#[test]
fn the_rate_limit_answers_429_with_retry_after() {
    let mut key = String::new();
    let s = server(
        ServeOptions {
            rate_per_minute: 3,
            ..loopback()
        },
        |ks| key = ks.create_key("default", Scope::Read, "").unwrap().0,
    );
    let codes: Vec<u16> = (0..4)
        .map(|_| req(s.addr, "GET", "/v1/collections", Some(&key), None).status)
        .collect();
    assert_eq!(codes, [200, 200, 200, 429]);
    let r = req(s.addr, "GET", "/v1/collections", Some(&key), None);
    r.problem(429, "rate_limited");
    let wait: u64 = r.headers["retry-after"].parse().unwrap();
    assert!((1..=20).contains(&wait), "{wait}");
}

#[test]
fn overload_is_shed_at_once_with_503_and_retry_after_never_queued_until_timeouts() {
    // One place to work and one to wait: of 24 asks sent at once (every third over
    // MCP, which shares the places and the queue), most find both taken and must be
    // refused at once, not held until the client gives up.
    let s = server(
        ServeOptions {
            max_concurrency: 1,
            max_queue: 1,
            queue_timeout: Duration::from_secs(30),
            rate_per_minute: 0,
            ..loopback()
        },
        |_| {},
    );
    let a = s.addr;
    let start = std::sync::Arc::new(std::sync::Barrier::new(24));
    let clients: Vec<_> = (0..24)
        .map(|i| {
            let start = start.clone();
            std::thread::spawn(move || {
                let body = json!({"question": format!("When does the acme rocket launch? ({i})"),
                    "collection": "docs"});
                let mcp = i % 3 == 2;
                let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "ask", "arguments": body}});
                start.wait();
                let t = Instant::now();
                let r = if mcp {
                    mcp_post(a, None, &call)
                } else {
                    req(a, "POST", "/v1/ask", None, Some(&body))
                };
                (mcp, r, t.elapsed())
            })
        })
        .collect();
    let results: Vec<(bool, Resp, Duration)> =
        clients.into_iter().map(|c| c.join().unwrap()).collect();
    let (mut shed, mut mcp_shed, mut mcp_answered) = (0, 0, 0);
    for (mcp, r, took) in &results {
        if *mcp {
            // A tool call is answered 200 either way: a result, or a tool error saying
            // the server is at capacity.
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            let v = r.json();
            if v["result"]["isError"] == json!(true) {
                let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
                assert!(text.contains("queue is full"), "{v}");
                assert!(
                    *took < Duration::from_secs(2),
                    "a shed tool call took {took:?}"
                );
                shed += 1;
                mcp_shed += 1;
            } else {
                assert!(
                    v["result"]["structuredContent"]["answer"].is_string(),
                    "{v}"
                );
                mcp_answered += 1;
            }
            continue;
        }
        match r.status {
            200 => {}
            503 => {
                shed += 1;
                let p = r.problem(503, "unavailable");
                assert!(
                    p["detail"].as_str().unwrap().contains("queue is full"),
                    "{p}"
                );
                let wait: u64 = r.headers["retry-after"].parse().unwrap();
                assert!((1..=5).contains(&wait), "{wait}");
                assert!(
                    *took < Duration::from_secs(2),
                    "a shed request took {took:?}"
                );
            }
            other => panic!("{other}: {}", String::from_utf8_lossy(&r.body)),
        }
    }
    let answered = results.len() - shed;
    assert!(
        shed > 0,
        "24 asks at once on one place and one queue slot: none shed"
    );
    assert!(
        mcp_shed > 0,
        "8 MCP asks among 24 at once on one place and one queue slot: none shed \
         ({mcp_answered} answered)"
    );
    assert!(answered >= 2, "only {answered} answered");
    let metrics = req(a, "GET", "/metrics", None, None);
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    assert!(
        text.contains(&format!("neuralcore_requests_shed_total {shed}")),
        "{text}"
    );
    // And the server answers normally once the burst is over.
    let r = req(
        a,
        "POST",
        "/v1/ask",
        None,
        Some(&json!({"question": "When does the acme rocket launch?", "collection": "docs"})),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_public_address_without_keys_is_refused() {
    let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
    let e = neuralcore_server::check_bind(&any, false).unwrap_err();
    assert!(e.contains("keys create") && e.contains("127.0.0.1"), "{e}");
    assert!(neuralcore_server::check_bind(&any, true).is_ok());
    assert!(neuralcore_server::check_bind(&"[::1]:80".parse().unwrap(), false).is_ok());
}

#[test]
fn metrics_count_routes_stages_and_jobs_without_ids_or_tenants() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| {
        ks.create_tenant("acme").unwrap();
        for scope in [Scope::Read, Scope::Admin] {
            let (k, _) = ks.create_key("acme", scope, "").unwrap();
            made.insert(scope.name(), k);
        }
        let (k, _) = ks.create_key("default", Scope::Admin, "ops").unwrap();
        made.insert("operator", k);
    });
    let a = s.addr;
    let (read, admin) = (made["read"].as_str(), made["operator"].as_str());
    // Counts span tenants: a tenant's own admin cannot read them.
    req(a, "GET", "/metrics", Some(&made["admin"]), None).problem(403, "forbidden");
    let q = json!({"query": "rocket launch", "collection": "docs", "k": 3});
    for _ in 0..3 {
        assert_eq!(
            req(a, "POST", "/v1/search", Some(read), Some(&q)).status,
            200
        );
    }
    let ask = json!({"question": "When does the acme rocket launch?", "collection": "docs"});
    assert_eq!(
        req(a, "POST", "/v1/ask", Some(read), Some(&ask)).status,
        200
    );
    req(a, "GET", "/v1/collections/nope", Some(read), None).problem(404, "not_found");
    req(a, "GET", "/metrics", Some(read), None).problem(403, "forbidden");
    req(a, "GET", "/metrics", None, None).problem(401, "unauthorized");
    let r = req(a, "GET", "/metrics", Some(admin), None);
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"].starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8(r.body).unwrap();
    for want in [
        "neuralcore_http_requests_total{route=\"/v1/search\",method=\"POST\",status=\"200\"} 3",
        "neuralcore_http_requests_total{route=\"/v1/collections/{name}\",method=\"GET\",status=\"404\"} 1",
        "neuralcore_http_request_duration_seconds_count{route=\"/v1/search\"} 3",
        "neuralcore_loop_stage_duration_seconds_count{stage=\"retrieve\"}",
        "neuralcore_asks_total{method=",
        "# TYPE neuralcore_jobs gauge",
        "neuralcore_cache_tier{role=\"hot\",tier=\"hot\",measure=\"entries\"}",
        "neuralcore_cache_tier{role=\"cold\",tier=\"redb\",measure=\"bytes\"}",
        "neuralcore_cache_stores_total{op=\"search\",result=\"stored\"}",
    ] {
        assert!(text.contains(want), "{want} not in\n{text}");
    }
    // The same search three times: the last two were served by the hot tier.
    let hot_hits: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("neuralcore_cache_lookups_total{op=\"search\",outcome=\"hot_hit\"} ")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(hot_hits >= 2, "{text}");
    // Route templates only: no collection names, tenants or keys.
    for secret in ["nope", "acme", "nck_"] {
        assert!(!text.contains(secret), "{secret} in\n{text}");
    }
}

#[test]
fn agents_and_tools_are_listed_without_server_paths() {
    let s = server(loopback(), |_| {});
    let a = s.addr;
    let tools = req(a, "GET", "/v1/tools", None, None).json();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["keyword_search", "vector_search", "grade"] {
        assert!(names.iter().any(|n| n.contains(want)), "{want}: {names:?}");
    }
    let agents = req(a, "GET", "/v1/agents", None, None).json();
    assert!(agents["ok"].is_boolean(), "{agents}");
    assert!(agents["agents"].is_array(), "{agents}");
    let text = agents.to_string();
    assert!(
        !text.contains(&s._tmp.path().display().to_string()),
        "{text}"
    );
}

#[test]
fn two_tenants_asking_at_once_never_see_each_other() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| made = acme_and_globex(ks));
    let a = s.addr;
    // Each tenant's words, and the other's it must never be shown.
    let cases = [
        (made["acme"].clone(), "Kourou", "volcano"),
        (made["globex"].clone(), "volcano", "Kourou"),
    ];
    let mut handles = Vec::new();
    for (key, mine, theirs) in cases {
        for worker in 0..3 {
            let key = key.clone();
            handles.push(std::thread::spawn(move || {
                let q = "rocket launch Kourou volcano lair Cyprus";
                for i in 0..6 {
                    let (path, body) = match (i + worker) % 3 {
                        0 => (
                            "/v1/search",
                            json!({"query": q, "collection": "docs", "k": 10}),
                        ),
                        1 => (
                            "/v1/ask",
                            json!({"question": format!("Where is the {q}?"), "collection": "docs"}),
                        ),
                        _ => ("/v1/collections", json!(null)),
                    };
                    let r = if body.is_null() {
                        req(a, "GET", path, Some(&key), None)
                    } else {
                        req(a, "POST", path, Some(&key), Some(&body))
                    };
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                    // The answer echoes the query: look past it.
                    let text = String::from_utf8_lossy(&r.body).replace(q, "");
                    assert!(!text.contains(theirs), "{path} leaked {theirs}: {text}");
                    if path == "/v1/search" {
                        assert!(text.contains(mine), "{path} lost {mine}: {text}");
                    }
                }
            }));
        }
    }
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn recent_runs_are_listed_newest_first_and_kept_per_tenant() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| made = acme_and_globex(ks));
    let a = s.addr;
    let (acme, globex) = (made["acme"].as_str(), made["globex"].as_str());
    let mut asked = Vec::new();
    for q in [
        "When does the acme rocket launch?",
        "Where does the acme rocket launch from?",
    ] {
        let r = req(
            a,
            "POST",
            "/v1/ask",
            Some(acme),
            Some(&json!({"question": q, "collection": "docs"})),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        asked.push(r.json());
        // Distinct start times, so "newest first" is a real order.
        std::thread::sleep(Duration::from_millis(5));
    }

    // The list: both, newest first, with their summaries.
    let r = req(a, "GET", "/v1/runs", Some(acme), None);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let runs = r.json()["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for (run, report) in runs.iter().zip(asked.iter().rev()) {
        assert_eq!(run["schema"], "neuralcore.run/v1");
        assert_eq!(run["run_id"], report["run_id"]);
        assert_eq!(run["question"], report["question"]);
        assert_eq!(run["collection"], "docs");
        assert_eq!(run["abstained"], report["abstained"]);
        assert_eq!(run["method"], report["method"]);
        assert_eq!(
            run["iterations"],
            report["iterations"].as_array().unwrap().len()
        );
        let answer = report["answer"].as_str().unwrap();
        assert!(answer.starts_with(run["answer"].as_str().unwrap().trim_end_matches('…')));
        let (started, finished, latency) = (
            run["started_ms"].as_u64().unwrap(),
            run["finished_ms"].as_u64().unwrap(),
            run["latency_ms"].as_u64().unwrap(),
        );
        assert!(
            started > 1_700_000_000_000 && finished == started + latency,
            "{run}"
        );
    }
    assert!(runs[0]["started_ms"].as_u64() > runs[1]["started_ms"].as_u64());
    let limited = req(a, "GET", "/v1/runs?limit=1", Some(acme), None).json();
    assert_eq!(limited["runs"].as_array().unwrap().len(), 1);
    assert_eq!(limited["runs"][0]["run_id"], runs[0]["run_id"]);

    // One run: the report the ask answered, with its trace.
    let id = asked[0]["run_id"].as_str().unwrap();
    let r = req(a, "GET", &format!("/v1/runs/{id}"), Some(acme), None);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let report = r.json();
    assert_eq!(report["schema"], "neuralcore.ask/v1");
    assert_eq!(report["answer"], asked[0]["answer"]);
    assert!(report["answer"]
        .as_str()
        .unwrap()
        .contains("ninth of March"));
    assert_eq!(report["iterations"], asked[0]["iterations"]);
    assert_eq!(report["verdicts"], asked[0]["verdicts"]);

    // The other tenant lists none of them, and cannot tell them from unknown ids.
    let theirs = req(a, "GET", "/v1/runs", Some(globex), None).json();
    assert_eq!(theirs["runs"], json!([]), "{theirs}");
    let hidden =
        req(a, "GET", &format!("/v1/runs/{id}"), Some(globex), None).problem(404, "not_found");
    let unknown = req(a, "GET", "/v1/runs/api-0-0", Some(globex), None).problem(404, "not_found");
    assert_eq!(
        hidden["detail"].as_str().unwrap().replace(id, "ID"),
        unknown["detail"].as_str().unwrap().replace("api-0-0", "ID")
    );
    assert!(!hidden.to_string().contains("acme"), "{hidden}");

    // Bad limits and ids are 400s.
    for q in ["limit=0", "limit=1000", "limit=x", "limit=-1", "nope=1"] {
        req(a, "GET", &format!("/v1/runs?{q}"), Some(acme), None).problem(400, "invalid_input");
    }
    req(a, "GET", "/v1/runs/a.b", Some(acme), None).problem(400, "invalid_input");
    req(a, "GET", "/v1/runs", None, None).problem(401, "unauthorized");
}

/// `POST /v1/runs/{run_id}/mark` (issue 16): a user's mark on an answer becomes training
/// pairs of that tenant's `GET /v1/feedback` and is listed by `GET /v1/marks`; bad marks
/// are 400s that keep nothing, another tenant's run is a 404 as an unknown one.
#[test]
fn a_marked_answer_is_listed_and_becomes_its_tenants_training_pairs() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| made = acme_and_globex(ks));
    let a = s.addr;
    let (acme, globex) = (made["acme"].as_str(), made["globex"].as_str());
    let q = "When does the acme rocket launch?";
    let r = req(
        a,
        "POST",
        "/v1/ask",
        Some(acme),
        Some(&json!({"question": q, "collection": "docs"})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let report = r.json();
    let id = report["run_id"].as_str().unwrap();
    let cited = report["citations"].as_array().unwrap();
    assert!(!cited.is_empty(), "{report}");
    let path = format!("/v1/runs/{id}/mark");
    let mark = |key: Option<&str>, path: &str, body: Value| req(a, "POST", path, key, Some(&body));

    for body in [
        json!({}),
        json!({"verdict": "meh"}),
        json!({"verdict": "good", "citations": []}),
        json!({"verdict": "good", "citations": [-1]}),
        json!({"verdict": "good", "citations": [1.5]}),
        json!({"verdict": "good", "citations": [null]}),
        json!({"verdict": "good", "stars": 5}),
        json!({"verdict": "bad", "note": "n".repeat(16 * 1024 + 1)}),
    ] {
        mark(Some(acme), &path, body.clone()).problem(400, "invalid_input");
    }
    mark(
        Some(acme),
        &path,
        json!({"verdict": "good", "citations": [99]}),
    )
    .problem(404, "not_found");
    let hidden = mark(Some(globex), &path, json!({"verdict": "bad"})).problem(404, "not_found");
    let unknown = mark(
        Some(globex),
        "/v1/runs/api-0-0/mark",
        json!({"verdict": "bad"}),
    )
    .problem(404, "not_found");
    assert_eq!(
        hidden["detail"].as_str().unwrap().replace(id, "ID"),
        unknown["detail"].as_str().unwrap().replace("api-0-0", "ID")
    );
    mark(None, &path, json!({"verdict": "bad"})).problem(401, "unauthorized");
    let none = req(a, "GET", "/v1/marks", Some(acme), None).json();
    assert_eq!(none["marks"], json!([]), "a bad mark was kept: {none}");

    let r = mark(
        Some(acme),
        &path,
        json!({"verdict": "good", "note": "right"}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let m = r.json();
    assert_eq!(m["schema"], "neuralcore.mark/v1");
    assert_eq!(
        (&m["run_id"], &m["verdict"], &m["note"]),
        (&json!(id), &json!("good"), &json!("right"))
    );
    assert_eq!(m["passages"].as_array().unwrap().len(), cited.len(), "{m}");
    let listed = req(a, "GET", "/v1/marks", Some(acme), None).json();
    assert_eq!(listed["marks"], json!([m]));
    let f = req(a, "GET", "/v1/feedback", Some(acme), None).json();
    assert_eq!(f["marked_answers"], 1, "{f}");
    for c in cited {
        assert!(
            f["pairs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["question"] == q && p["passage"] == c["text"] && p["label"] == 1.0),
            "{c} is not a pair: {f}"
        );
    }
    let theirs = req(a, "GET", "/v1/feedback", Some(globex), None).json();
    assert_eq!(
        (&theirs["pairs"], &theirs["marked_answers"]),
        (&json!([]), &json!(0)),
        "{theirs}"
    );
    let theirs = req(a, "GET", "/v1/marks", Some(globex), None).json();
    assert_eq!(theirs["marks"], json!([]));
}

#[test]
fn a_backup_is_the_default_tenants_admins_to_take_and_goes_only_into_its_backups_folder() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| {
        ks.create_tenant("acme").unwrap();
        let (k, _) = ks.create_key("acme", Scope::Admin, "").unwrap();
        made.insert("tenant_admin", k);
        let (k, _) = ks.create_key("default", Scope::Write, "").unwrap();
        made.insert("writer", k);
        let (k, _) = ks.create_key("default", Scope::Admin, "ops").unwrap();
        made.insert("operator", k);
    });
    let a = s.addr;
    let backups = s._tmp.path().join("data/backups");
    let body = json!({ "name": "nightly-1" });
    // A backup spans tenants: neither a tenant's admin nor a writer may take one.
    req(
        a,
        "POST",
        "/v1/admin/backup",
        Some(&made["tenant_admin"]),
        Some(&body),
    )
    .problem(403, "forbidden");
    req(
        a,
        "POST",
        "/v1/admin/backup",
        Some(&made["writer"]),
        Some(&body),
    )
    .problem(403, "forbidden");
    req(a, "POST", "/v1/admin/backup", None, Some(&body)).problem(401, "unauthorized");
    assert!(!backups.join("nightly-1").exists());
    let op = Some(made["operator"].as_str());
    // Only a name: never a path elsewhere on the server's machine.
    for bad in ["/tmp/x", "../x", "a/b", ".hidden", ""] {
        req(
            a,
            "POST",
            "/v1/admin/backup",
            op,
            Some(&json!({ "name": bad })),
        )
        .problem(400, "invalid_input");
    }
    req(
        a,
        "POST",
        "/v1/admin/backup",
        op,
        Some(&json!({"dest": "/x"})),
    )
    .problem(400, "invalid_input");
    let r = req(a, "POST", "/v1/admin/backup", op, Some(&body));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let m = r.json();
    assert_eq!(m["schema"], "neuralcore.backup/v1");
    let dest = backups.join("nightly-1");
    assert!(dest.join("store.redb").is_file() && dest.join("backup.json").is_file());
    assert!(
        dest.join("auth.redb").is_file(),
        "the keys, held by the server: {m}"
    );
    // Never over an existing backup; and a backup leaves the backups folder out.
    req(a, "POST", "/v1/admin/backup", op, Some(&body)).problem(409, "conflict");
    let r = req(
        a,
        "POST",
        "/v1/admin/backup",
        op,
        Some(&json!({"name": "nightly-2"})),
    );
    assert_eq!(r.status, 200);
    assert!(!backups.join("nightly-2/backups").exists());
}
