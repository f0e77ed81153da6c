//! The client against a scripted local HTTP server (`support::FixtureServer`): success,
//! streaming, retries, timeouts, malformed and hostile responses.

mod support;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_llm::{ChatMessage, ChatRequest, LlmClient, LlmConfig, LlmError, Role};
use support::{closed_port, completion, delta_event, FixtureServer, Reply};

/// A config for `base_url` with fast retries and no key from the environment.
fn cfg(base_url: &str) -> LlmConfig {
    LlmConfig {
        model: "test-model".into(),
        api_key_env: String::new(),
        backoff_ms: 10,
        timeout_ms: 5_000,
        ..LlmConfig::new(base_url, "test-model")
    }
}

fn client(server: &FixtureServer) -> LlmClient {
    LlmClient::new(cfg(&server.base_url())).unwrap()
}

fn question() -> ChatRequest {
    ChatRequest::new(vec![
        ChatMessage::system("Answer briefly."),
        ChatMessage::user("What is the capital of France?"),
    ])
}

const USAGE_EVENT: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\
                           \"completion_tokens\":3,\"total_tokens\":15}}\n\n";

#[test]
fn fixture_server_success_non_stream_reports_usage_and_cost() {
    let server = FixtureServer::start(vec![Reply::json(200, completion("Paris.", 20, 2))]);
    let c = LlmClient::new(LlmConfig {
        price_input_per_mtok: 1.0,
        price_output_per_mtok: 4.0,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let r = c.chat(&question()).unwrap();
    assert_eq!(r.text, "Paris.");
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (20, 2));
    assert!(!r.usage_estimated);
    assert_eq!(r.model, "fixture-model");
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.attempts, 1);
    assert!(r.latency_ms > 0.0);
    assert_eq!(r.ttft_ms, None);
    let cost = r.cost_usd.unwrap();
    assert!(
        (cost - (20.0 * 1.0 + 2.0 * 4.0) / 1e6).abs() < 1e-15,
        "{cost}"
    );
    // Unpriced: no cost.
    assert_eq!(client(&server).chat(&question()).unwrap().cost_usd, None);
}

#[test]
fn fixture_server_request_carries_model_messages_options_and_bearer() {
    let server = FixtureServer::start(vec![Reply::json(200, completion("ok", 1, 1))]);
    let c = LlmClient::new(LlmConfig {
        api_key: Some("sk-test-123".into()),
        temperature: 0.25,
        max_tokens: 77,
        ..cfg(&server.base_url())
    })
    .unwrap();
    c.chat(&question()).unwrap();
    let req = ChatRequest {
        stop: vec!["END".into()],
        ..question().with_max_tokens(5).with_temperature(0.75)
    };
    c.chat_stream(&req, &mut |_| {}).unwrap();

    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    let first = &recorded[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.header("authorization"), Some("Bearer sk-test-123"));
    assert!(first
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let body = first.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][0]["content"], "Answer briefly.");
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(
        body["messages"][1]["content"],
        "What is the capital of France?"
    );
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["max_tokens"], 77);
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());

    let second = recorded[1].json();
    assert_eq!(second["stream"], true);
    assert_eq!(second["stream_options"]["include_usage"], true);
    assert_eq!(second["max_tokens"], 5);
    assert_eq!(second["temperature"], 0.75);
    assert_eq!(second["stop"][0], "END");
    assert_eq!(
        recorded[1].header("accept"),
        Some("text/event-stream"),
        "{:?}",
        recorded[1].headers
    );
}

#[test]
fn fixture_server_no_authorization_header_without_key() {
    let server = FixtureServer::start(vec![Reply::json(200, completion("ok", 1, 1))]);
    client(&server).chat(&question()).unwrap();
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[test]
fn fixture_server_api_key_read_from_named_env_var() {
    // A variable no other test touches.
    std::env::set_var("NEURALCORE_LLM_FIXTURE_KEY", "sk-from-env");
    let server = FixtureServer::start(vec![Reply::json(200, completion("ok", 1, 1))]);
    let c = LlmClient::new(LlmConfig {
        api_key_env: "NEURALCORE_LLM_FIXTURE_KEY".into(),
        ..cfg(&server.base_url())
    })
    .unwrap();
    c.chat(&question()).unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-from-env")
    );
    assert!(!format!("{c:?}").contains("sk-from-env"));
}

#[test]
fn fixture_server_streams_sse_deltas_with_usage() {
    let pieces = [
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n".to_owned(),
        ": keep-alive comment\n\n".to_owned(),
        delta_event("The capital"),
        delta_event(" of France"),
        delta_event(" is Paris."),
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
            .to_owned(),
        USAGE_EVENT.to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ];
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let server = FixtureServer::start(vec![Reply::sse(&pieces)]);
    let mut deltas = Vec::new();
    let r = client(&server)
        .chat_stream(&question(), &mut |d| deltas.push(d.to_owned()))
        .unwrap();
    assert_eq!(deltas, ["The capital", " of France", " is Paris."]);
    assert_eq!(r.text, deltas.concat());
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (12, 3));
    assert!(!r.usage_estimated);
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.model, "fixture-model");
    assert_eq!(r.attempts, 1);
    assert!(r.ttft_ms.is_some_and(|t| t <= r.latency_ms));
}

#[test]
fn fixture_server_stream_split_mid_line_with_crlf_and_no_done() {
    // Events cut at awkward places, CRLF line ends, no usage and no [DONE].
    let all = format!("{}{}", delta_event("Hel"), delta_event("lo")).replace('\n', "\r\n");
    let (a, rest) = all.split_at(9);
    let (b, c) = rest.split_at(rest.len() - 3);
    let server = FixtureServer::start(vec![Reply::sse(&[a, b, c])]);
    let mut deltas = Vec::new();
    let r = client(&server)
        .chat_stream(&question(), &mut |d| deltas.push(d.to_owned()))
        .unwrap();
    assert_eq!(deltas, ["Hel", "lo"]);
    assert_eq!(r.text, "Hello");
    // No usage from the server: estimated at ~4 chars a token.
    assert!(r.usage_estimated);
    assert_eq!(r.usage.completion_tokens, 2);
    let prompt_chars = "Answer briefly.".len() + "What is the capital of France?".len();
    assert!(r.usage.prompt_tokens >= (prompt_chars as u64) / 4);
}

#[test]
fn fixture_server_chat_streams_when_configured() {
    let e1 = delta_event("a");
    let e2 = delta_event("b");
    let server = FixtureServer::start(vec![Reply::sse(&[&e1, &e2, "data: [DONE]\n\n"])]);
    let c = LlmClient::new(LlmConfig {
        stream: true,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let r = c.chat(&question()).unwrap();
    assert_eq!(r.text, "ab");
    assert_eq!(server.requests()[0].json()["stream"], true);
}

#[test]
fn fixture_server_plain_json_answer_to_stream_request_is_one_delta() {
    let server = FixtureServer::start(vec![Reply::json(200, completion("whole", 3, 1))]);
    let mut deltas = Vec::new();
    let r = client(&server)
        .chat_stream(&question(), &mut |d| deltas.push(d.to_owned()))
        .unwrap();
    assert_eq!(deltas, ["whole"]);
    assert_eq!(r.text, "whole");
    assert_eq!(r.usage.total(), 4);
}

#[test]
fn fixture_server_retries_on_500_then_succeeds() {
    let server = FixtureServer::start(vec![
        Reply::json(500, r#"{"error":"boom"}"#),
        Reply::json(200, completion("Paris", 5, 1)),
    ]);
    let r = client(&server).chat(&question()).unwrap();
    assert_eq!(r.text, "Paris");
    assert_eq!(r.attempts, 2);
    assert_eq!(server.hits(), 2);
}

#[test]
fn fixture_server_429_with_retry_after_zero_retries_at_once() {
    let server = FixtureServer::start(vec![
        Reply::json(429, r#"{"error":{"message":"slow down"}}"#).header("Retry-After", "0"),
        Reply::json(200, completion("Paris", 5, 1)),
    ]);
    // A huge backoff: only honouring `Retry-After: 0` keeps this fast.
    let c = LlmClient::new(LlmConfig {
        backoff_ms: 20_000,
        max_backoff_ms: 20_000,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let t = Instant::now();
    let r = c.chat(&question()).unwrap();
    assert_eq!(r.attempts, 2);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn fixture_server_429_retry_after_is_capped() {
    let server = FixtureServer::start(vec![
        Reply::json(503, "{}").header("Retry-After", "3600"),
        Reply::json(200, completion("ok", 1, 1)),
    ]);
    let c = LlmClient::new(LlmConfig {
        max_backoff_ms: 50,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let t = Instant::now();
    assert_eq!(c.chat(&question()).unwrap().attempts, 2);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn fixture_server_persistent_503_exhausts_retries_and_is_transient() {
    let server = FixtureServer::start(vec![Reply::json(503, "overloaded")]);
    let err = client(&server).chat(&question()).unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 503,
            body: "overloaded".into()
        }
    );
    assert!(err.is_transient());
    assert_eq!(server.hits(), 3);
}

#[test]
fn fixture_server_401_is_not_retried() {
    let server = FixtureServer::start(vec![Reply::json(
        401,
        r#"{"error":{"message":"Incorrect API key provided"}}"#,
    )]);
    let err = client(&server).chat(&question()).unwrap_err();
    match &err {
        LlmError::Http { status: 401, body } => assert!(body.contains("Incorrect API key")),
        other => panic!("{other:?}"),
    }
    assert!(!err.is_transient());
    assert_eq!(server.hits(), 1);
}

#[test]
fn fixture_server_redirect_is_reported_not_followed() {
    let server = FixtureServer::start(vec![
        Reply::json(301, "").header("Location", "http://127.0.0.1:1/elsewhere")
    ]);
    let err = client(&server).chat(&question()).unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 301, .. }), "{err:?}");
    assert_eq!(server.hits(), 1);
}

#[test]
fn fixture_server_malformed_json_every_time_gives_malformed_after_all_attempts() {
    let server = FixtureServer::start(vec![Reply::json(200, "{\"choices\": [ oops")]);
    let c = LlmClient::new(LlmConfig {
        max_retries: 3,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let err = c.chat(&question()).unwrap_err();
    match &err {
        LlmError::Malformed(m) => assert!(m.contains("not JSON") && m.contains("oops"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(!err.is_transient());
    assert_eq!(server.hits(), 4);
}

#[test]
fn fixture_server_malformed_once_then_recovers() {
    let server = FixtureServer::start(vec![
        Reply::raw(200, "text/html", b"<html>proxy error</html>".to_vec()),
        Reply::json(200, completion("ok", 1, 1)),
    ]);
    assert_eq!(client(&server).chat(&question()).unwrap().attempts, 2);
}

#[test]
fn fixture_server_empty_choices_and_missing_content_are_malformed() {
    for (body, want) in [
        (r#"{"choices":[]}"#, "empty `choices`"),
        (r#"{"object":"chat.completion"}"#, "no `choices`"),
        (
            r#"{"choices":[{"message":{"role":"assistant"}}]}"#,
            "message.content",
        ),
        ("", "empty body"),
    ] {
        let server = FixtureServer::start(vec![Reply::json(200, body)]);
        let c = LlmClient::new(LlmConfig {
            max_retries: 0,
            ..cfg(&server.base_url())
        })
        .unwrap();
        match c.chat(&question()) {
            Err(LlmError::Malformed(m)) => assert!(m.contains(want), "{m} / {want}"),
            other => panic!("{body}: {other:?}"),
        }
        assert_eq!(server.hits(), 1);
    }
}

#[test]
fn fixture_server_slow_response_times_out_within_bounded_time() {
    let server = FixtureServer::start(vec![
        Reply::json(200, completion("late", 1, 1)).delayed(Duration::from_secs(3))
    ]);
    let c = LlmClient::new(LlmConfig {
        timeout_ms: 300,
        max_retries: 1,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let t = Instant::now();
    let err = c.chat(&question()).unwrap_err();
    let elapsed = t.elapsed();
    assert!(matches!(err, LlmError::Timeout(_)), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(server.hits(), 2);
    // Two attempts of 300 ms plus a short backoff, far below the server's 3 s.
    assert!(elapsed < Duration::from_millis(2_000), "{elapsed:?}");
}

/// `until` bounds the whole request, retries and backoff included, whatever the client's
/// own timeout; a request begun after it fails at once.
#[test]
fn fixture_server_slow_response_ends_at_the_callers_deadline() {
    let server = FixtureServer::start(vec![
        Reply::json(200, completion("late", 1, 1)).delayed(Duration::from_secs(5))
    ]);
    let c = LlmClient::new(LlmConfig {
        timeout_ms: 30_000,
        max_retries: 2,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let t = Instant::now();
    let err = c
        .until(t + Duration::from_millis(600))
        .chat(&question())
        .unwrap_err();
    let elapsed = t.elapsed();
    assert!(matches!(err, LlmError::Timeout(_)), "{err:?}");
    assert!(elapsed < Duration::from_millis(1_500), "{elapsed:?}");
    assert_eq!(server.hits(), 1, "no retry without time for it");
    let late = c.until(Instant::now()).chat(&question()).unwrap_err();
    assert!(late.to_string().contains("deadline"), "{late}");
    assert_eq!(server.hits(), 1, "nothing sent past the deadline");
}

#[test]
fn fixture_server_stalled_stream_times_out() {
    let e = delta_event("x");
    let server = FixtureServer::start(vec![
        Reply::sse(&[&e, "data: [DONE]\n\n"]).paced(Duration::from_secs(3))
    ]);
    let c = LlmClient::new(LlmConfig {
        timeout_ms: 400,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let t = Instant::now();
    let mut n = 0;
    let err = c.chat_stream(&question(), &mut |_| n += 1).unwrap_err();
    assert!(matches!(err, LlmError::Timeout(_)), "{err:?}");
    // Text was delivered, so no retry.
    assert_eq!((n, server.hits()), (1, 1));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn fixture_connection_refused_is_unavailable() {
    let port = closed_port();
    let c = LlmClient::new(LlmConfig {
        max_retries: 1,
        ..cfg(&format!("http://127.0.0.1:{port}/v1"))
    })
    .unwrap();
    let t = Instant::now();
    let err = c.chat(&question()).unwrap_err();
    assert!(matches!(err, LlmError::Unavailable(_)), "{err:?}");
    assert!(err.is_transient());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn fixture_not_configured_on_empty_base_url() {
    assert_eq!(
        LlmClient::new(LlmConfig::default()).unwrap_err(),
        LlmError::NotConfigured
    );
    assert_eq!(
        LlmClient::new(LlmConfig::new("  ", "m")).unwrap_err(),
        LlmError::NotConfigured
    );
}

#[test]
fn fixture_invalid_base_url_rejected() {
    for url in [
        "localhost:8080/v1",
        "ftp://127.0.0.1/v1",
        "http://",
        "::nonsense::",
    ] {
        let err = LlmClient::new(LlmConfig::new(url, "m")).unwrap_err();
        assert!(matches!(err, LlmError::InvalidConfig(_)), "{url}: {err:?}");
        assert!(!err.is_transient());
    }
    let err = LlmClient::new(LlmConfig {
        timeout_ms: 0,
        ..LlmConfig::new("http://127.0.0.1:1/v1", "m")
    })
    .unwrap_err();
    assert!(matches!(err, LlmError::InvalidConfig(_)), "{err:?}");
    let err = LlmClient::new(LlmConfig {
        api_key: Some("bad\nkey".into()),
        ..LlmConfig::new("http://127.0.0.1:1/v1", "m")
    })
    .unwrap_err();
    assert!(matches!(err, LlmError::InvalidConfig(_)), "{err:?}");
}

#[test]
fn fixture_server_stream_garbage_after_delta_is_not_retried() {
    let e = delta_event("partial");
    let server = FixtureServer::start(vec![Reply::sse(&[&e, "data: {not json\n\n"])]);
    let mut deltas = Vec::new();
    let err = client(&server)
        .chat_stream(&question(), &mut |d| deltas.push(d.to_owned()))
        .unwrap_err();
    assert!(matches!(err, LlmError::Malformed(_)), "{err:?}");
    assert_eq!(deltas, ["partial"]);
    assert_eq!(server.hits(), 1);
}

#[test]
fn fixture_server_stream_garbage_before_any_delta_is_retried() {
    let e = delta_event("fine");
    let server = FixtureServer::start(vec![
        Reply::sse(&["data: <html>\n\n"]),
        Reply::sse(&["data: {\"choices\":[]}\n\n"]),
        Reply::sse(&[&e, "data: [DONE]\n\n"]),
    ]);
    let mut deltas = Vec::new();
    let r = client(&server)
        .chat_stream(&question(), &mut |d| deltas.push(d.to_owned()))
        .unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("fine", 3));
    assert_eq!(deltas, ["fine"]);
}

#[test]
fn fixture_server_stream_embedded_error_is_an_http_error() {
    let server = FixtureServer::start(vec![Reply::sse(&[
        "data: {\"error\":{\"code\":400,\"message\":\"context too long\"}}\n\n",
    ])]);
    let err = client(&server)
        .chat_stream(&question(), &mut |_| {})
        .unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 400,
            body: "context too long".into()
        }
    );
    assert_eq!(server.hits(), 1);
}

#[test]
fn fixture_server_oversized_body_is_rejected_without_buffering_it_all() {
    // 9 MiB of whitespace inside a valid-looking body: over the 8 MiB cap.
    let mut body = b"{\"choices\":[".to_vec();
    body.resize(9 * 1024 * 1024, b' ');
    body.extend_from_slice(b"]}");
    let server = FixtureServer::start(vec![Reply::raw(200, "application/json", body)]);
    let c = LlmClient::new(LlmConfig {
        max_retries: 0,
        ..cfg(&server.base_url())
    })
    .unwrap();
    match c.chat(&question()) {
        Err(LlmError::Malformed(m)) => assert!(m.contains("larger than"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fixture_server_garbage_instead_of_http_does_not_panic() {
    // A raw TCP server that answers with non-HTTP bytes.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        use std::io::{Read, Write};
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n\x00\x01garbage");
        }
    });
    let c = LlmClient::new(LlmConfig {
        max_retries: 1,
        ..cfg(&format!("http://127.0.0.1:{port}/v1"))
    })
    .unwrap();
    let err = c.chat(&question()).unwrap_err();
    assert!(
        matches!(err, LlmError::Malformed(_) | LlmError::Unavailable(_)),
        "{err:?}"
    );
    handle.join().unwrap();
}

#[test]
fn fixture_server_cancel_stops_retrying() {
    let server = FixtureServer::start(vec![Reply::json(503, "busy")]);
    let c = LlmClient::new(LlmConfig {
        backoff_ms: 10_000,
        max_backoff_ms: 10_000,
        ..cfg(&server.base_url())
    })
    .unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let t = Instant::now();
    let err = c.chat_with_cancel(&question(), &cancel).unwrap_err();
    assert_eq!(err, LlmError::Cancelled);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(server.hits(), 1);
    canceller.join().unwrap();
}

#[test]
fn fixture_roles_serialize_lowercase() {
    let m = ChatMessage::assistant("x");
    assert_eq!(m.role, Role::Assistant);
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"role":"assistant","content":"x"}"#
    );
}
