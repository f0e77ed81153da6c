//! The Mind on a Redis that restarts under a run (issue 19's faults): an ask in flight
//! when its Redis goes away and comes back empty fails with a clear error instead of
//! answering from a blackboard that lost its keys, and the next ask works. A private
//! `redis-server` (installed by `scripts/test.sh`) on a free port, so stopping it
//! disturbs no other test; a fixture server plays a slow LLM, so the ask is surely in
//! flight while Redis restarts.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use neuralcore_app::{App, AppError, AskOptions, OpenOptions, Tenant};
use neuralcore_engine::{ColdTierKind, Config, HotTierKind};
use neuralcore_web::fixture::{FixtureServer, Reply};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_redis(port: u16, dir: &Path) -> std::process::Child {
    let child = std::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server (scripts/test.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

const TIDES: &str =
    "# Tides\n\nTides are caused by the gravitational pull of the Moon on the oceans.\n";

#[test]
fn fixture_llm_slow_redis_restarted_mid_ask_fails_that_ask_clearly_and_the_next_one_works() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut redis = start_redis(port, tmp.path());
    // The LLM answers after 1.5 s, and says when a call arrives.
    let (called_tx, called) = mpsc::channel::<()>();
    let called_tx = std::sync::Mutex::new(called_tx);
    let llm = FixtureServer::start(move |_| {
        let _ = called_tx.lock().unwrap().send(());
        Reply::json(
            serde_json::json!({
                "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant",
                    "content": "Tides are caused by the gravitational pull of the Moon [1]."
                }}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62}
            })
            .to_string(),
        )
        .delayed(Duration::from_millis(1500))
    })
    .unwrap();
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    config.cache.hot = HotTierKind::Off;
    config.cache.cold = ColdTierKind::Off;
    config.mind.backend = neuralcore_engine::MindBackend::Redis;
    config.mind.redis_url = format!("redis://127.0.0.1:{port}/");
    config.mind.redis_prefix = format!("ncmindfault{}", std::process::id());
    config.llm.base_url = format!("{}/v1", llm.url());
    config.llm.model = "m".into();
    config.llm.api_key_env = String::new();
    config.llm.max_retries = 0;
    config.llm.timeout_ms = 20_000;
    let app = App::open(&tmp.path().join("data"), config, OpenOptions::default()).unwrap();
    let t = Tenant::default_tenant();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("tides.md"), TIDES).unwrap();
    app.ingest(&t, &[src], "docs", &mut ()).unwrap();
    let opts = AskOptions {
        collection: "docs".into(),
        ..Default::default()
    };
    let q = "What causes the tides?";
    let before = app.ask(&t, "before", q, &opts, false).unwrap();
    assert!(!before.abstained, "{before:#?}");
    while called.try_recv().is_ok() {}

    let in_flight = std::thread::scope(|s| {
        let ask = s.spawn(|| app.ask(&t, "in-flight", q, &opts, false));
        // Redis goes away while the LLM is writing, and comes back empty.
        called
            .recv_timeout(Duration::from_secs(30))
            .expect("the ask reached the LLM");
        redis.kill().unwrap();
        redis.wait().unwrap();
        redis = start_redis(port, tmp.path());
        ask.join().unwrap()
    });
    match in_flight {
        Err(e) => {
            let said = e.to_string();
            assert!(
                matches!(e, AppError::Unavailable(_)) && said.contains("lost its keys"),
                "not a clear error: {e:?}"
            );
        }
        Ok(r) => panic!("an ask whose blackboard was wiped answered: {r:#?}"),
    }
    // Redis is back: new asks work, as before.
    let after = app.ask(&t, "after", q, &opts, false).unwrap();
    assert_eq!(after.answer, before.answer);
    redis.kill().unwrap();
    let _ = redis.wait();
}
