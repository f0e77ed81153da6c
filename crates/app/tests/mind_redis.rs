//! The Mind on a Redis that restarts under a run (issue 19's faults): an ask in flight
//! when its Redis goes away and comes back empty fails with a clear error instead of
//! answering from a blackboard that lost its keys, and the next ask works. A private
//! `redis-server` (installed by `scripts/test.sh`) on a free port, so stopping it
//! disturbs no other test; a fixture server plays a slow LLM, so the ask is surely in
//! flight while Redis restarts.

use std::time::Duration;

use neuralcore_app::{App, AppError, AskOptions, OpenOptions, Tenant};
use neuralcore_engine::{ColdTierKind, Config, HotTierKind};
use neuralcore_web::fixture::slow_llm;

mod support;
use support::{free_port, start_redis};

const TIDES: &str =
    "# Tides\n\nTides are caused by the gravitational pull of the Moon on the oceans.\n";

#[test]
fn fixture_llm_slow_redis_restarted_mid_ask_fails_that_ask_clearly_and_the_next_one_works() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut redis = start_redis(port, tmp.path());
    // The LLM answers after 1.5 s, and says when a call arrives.
    let (llm, called) = slow_llm(
        "Tides are caused by the gravitational pull of the Moon [1].",
        Duration::from_millis(1500),
    )
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
