//! The data dir's format stamp (`format.json`): written by a new data dir, added to one
//! made before stamps existed without touching its documents, and a newer or damaged
//! stamp refused with a message that says what to do, before anything is written.

use std::path::Path;

use neuralcore_engine::{Config, Engine, IngestObserver, DATA_DIR_FORMAT, FORMAT_FILE};

struct Quiet;
impl IngestObserver for Quiet {}

fn config() -> Config {
    let mut c = Config::default();
    c.embedding.model = String::new();
    c
}

fn ingest_one(e: &Engine, dir: &Path) {
    let f = dir.join("note.md");
    std::fs::write(&f, "# Note\n\nThe tide turns twice a day.").unwrap();
    let s = e.ingest(&[f], "default", &mut Quiet).unwrap();
    assert_eq!(s.failed, 0);
}

fn stamp(data: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(data.join(FORMAT_FILE)).unwrap()).unwrap()
}

#[test]
fn a_new_data_dir_is_stamped_and_an_unstamped_one_keeps_its_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    {
        let e = Engine::open(&data, config()).unwrap();
        ingest_one(&e, tmp.path());
    }
    assert_eq!(stamp(&data)["format"], DATA_DIR_FORMAT);
    assert_eq!(stamp(&data)["written_by"], env!("CARGO_PKG_VERSION"));

    // A data dir of a release before stamps: the same files, no stamp.
    std::fs::remove_file(data.join(FORMAT_FILE)).unwrap();
    let e = Engine::open(&data, config()).unwrap();
    assert_eq!(stamp(&data)["format"], DATA_DIR_FORMAT);
    let hits = e.search("default", "tide", 3, None).unwrap().hits;
    assert_eq!(hits[0].document.title, "Note");
}

#[test]
fn a_newer_or_damaged_stamp_is_refused_with_what_to_do_and_nothing_written() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let newer = format!(
        "{{\"format\": {}, \"written_by\": \"9.9.0\"}}",
        DATA_DIR_FORMAT + 1
    );
    std::fs::write(data.join(FORMAT_FILE), &newer).unwrap();
    let err = Engine::open(&data, config()).err().unwrap().to_string();
    assert!(err.contains("written by neuralcore 9.9.0"), "{err}");
    assert!(err.contains("run neuralcore 9.9.0 or newer"), "{err}");
    assert!(
        !data.join("store.redb").exists(),
        "nothing opened for writing"
    );
    assert_eq!(
        std::fs::read_to_string(data.join(FORMAT_FILE)).unwrap(),
        newer
    );

    // A newer stamp of another shape is still newer, not damaged.
    std::fs::write(data.join(FORMAT_FILE), "{\"format\": 99, \"by\": 1}").unwrap();
    let err = Engine::open(&data, config()).err().unwrap().to_string();
    assert!(err.contains("has format 99"), "{err}");
    assert!(!data.join("store.redb").exists());

    std::fs::write(data.join(FORMAT_FILE), "{\"format\": ").unwrap();
    let err = Engine::open(&data, config()).err().unwrap().to_string();
    assert!(err.contains("format.json is damaged"), "{err}");
    assert!(!data.join("store.redb").exists());
}
