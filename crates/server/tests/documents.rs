//! Documents and ingest jobs over HTTP: uploads (JSON texts and multipart files) answer
//! 202 with a job that runs in the background; sources, documents and chunks are read
//! back with provenance and no server paths; tenants never see each other's; bad
//! uploads get clear problems; a cancelled job keeps what it finished.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use neuralcore_app::Scope;
use serde_json::{json, Value};

/// A multipart/form-data request of `files` (name, bytes).
fn multipart(addr: SocketAddr, path: &str, key: Option<&str>, files: &[(&str, &[u8])]) -> Resp {
    let boundary = "neuralcoreBoundary7d2f";
    let mut body = Vec::new();
    for (name, bytes) in files {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(k) = key {
        r.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    r.push_str("\r\n");
    let mut bytes = r.into_bytes();
    bytes.extend_from_slice(&body);
    raw(addr, &bytes)
}

#[test]
fn texts_and_files_upload_as_jobs_and_read_back_with_provenance() {
    let s = server(loopback(), |_| {});
    let a = s.addr;
    // JSON texts with a title and metadata → 202 and a job.
    let r = req(
        a,
        "POST",
        "/v1/collections/notes/documents",
        None,
        Some(&json!({"documents": [
            {"name": "tides", "title": "Tides", "text": "Tides are caused by the gravitational pull of the Moon on the oceans.", "metadata": {"author": "ada", "year": 2024}},
            {"text": "The borrow checker enforces Rust's ownership rules at compile time."}
        ]})),
    );
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let job = r.json();
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["schema"], "neuralcore.job/v1");
    assert_eq!(
        r.headers.get("location").map(String::as_str),
        Some(format!("/v1/jobs/{id}").as_str())
    );
    let done = wait_job(a, None, &id);
    assert_eq!(done["state"], "indexed", "{done}");
    assert_eq!(done["counts"]["ingested"], 2, "{done}");
    let files = done["files"].as_array().unwrap();
    assert_eq!(files[0], "tides.json");
    // An unnamed text is named by its content.
    let unnamed = files[1].as_str().unwrap();
    assert!(
        unnamed.starts_with("text-") && unnamed.len() == "text-".len() + 12 + ".json".len(),
        "{unnamed}"
    );

    // Files as multipart: markdown, and a text file with invalid UTF-8 (kept, with a
    // warning).
    let r = multipart(
        a,
        "/v1/collections/notes/documents",
        None,
        &[
            (
                "moon.md",
                b"# Moon\n\nThe Moon orbits the Earth every 27.3 days.\n",
            ),
            ("latin1.txt", b"Caf\xe9 au lait is served in Lyon.\n"),
        ],
    );
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let done = wait_job(a, None, r.json()["id"].as_str().unwrap());
    assert_eq!(done["state"], "indexed", "{done}");
    assert_eq!(done["counts"]["ingested"], 2, "{done}");
    assert!(
        done["warnings"].to_string().contains("latin1.txt"),
        "{done}"
    );

    // Searchable, with provenance naming the upload, not the server's disk.
    let hits = req(
        a,
        "POST",
        "/v1/search",
        None,
        Some(&json!({"query": "what causes tides", "collection": "notes", "k": 3})),
    )
    .json();
    let top = &hits["hits"][0];
    assert!(
        top["text"].as_str().unwrap().contains("gravitational"),
        "{hits}"
    );
    let text = hits.to_string();
    assert!(text.contains("upload:tides.json"), "{text}");
    assert!(
        !text.contains(&s._tmp.path().display().to_string()),
        "{text}"
    );

    // Sources list the uploads; a document and a chunk read back with metadata.
    let sources = req(a, "GET", "/v1/collections/notes/sources", None, None).json();
    let ids: Vec<&str> = sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "{sources}");
    for want in ["upload:tides.json", "upload:moon.md", "upload:latin1.txt"] {
        assert!(ids.contains(&want), "{sources}");
    }
    let tides = sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "upload:tides.json")
        .unwrap();
    let doc_id = tides["documents"][0].as_str().unwrap();
    let doc = req(
        a,
        "GET",
        &format!("/v1/collections/notes/documents/{doc_id}"),
        None,
        None,
    )
    .json();
    assert_eq!(doc["schema"], "neuralcore.documents/v1");
    assert_eq!(doc["title"], "Tides");
    assert_eq!(doc["metadata"]["author"], "ada");
    assert_eq!(doc["collection"], "notes");
    assert_eq!(doc["provenance"][0]["source_id"], "upload:tides.json");
    let chunk = req(
        a,
        "GET",
        &format!("/v1/collections/notes/documents/{doc_id}/chunks/0"),
        None,
        None,
    )
    .json();
    assert_eq!(chunk["id"], format!("{doc_id}#0"));
    assert!(chunk["text"].as_str().unwrap().contains("Moon"), "{chunk}");
    assert!(chunk["span"].is_array(), "{chunk}");
    req(
        a,
        "GET",
        &format!("/v1/collections/notes/documents/{doc_id}/chunks/9"),
        None,
        None,
    )
    .problem(404, "not_found");
    req(
        a,
        "GET",
        "/v1/collections/notes/documents/0123456789abcdef0123456789abcdef/chunks/0",
        None,
        None,
    )
    .problem(404, "not_found");

    // An upload of the same name replaces it; deleting the source removes it.
    let r = req(
        a,
        "POST",
        "/v1/collections/notes/documents",
        None,
        Some(
            &json!({"documents": [{"name": "tides", "text": "Spring tides follow the new and the full Moon."}]}),
        ),
    );
    wait_job(a, None, r.json()["id"].as_str().unwrap());
    let sources = req(a, "GET", "/v1/collections/notes/sources", None, None).json();
    assert_eq!(sources["sources"].as_array().unwrap().len(), 4, "{sources}");
    let r = req(
        a,
        "DELETE",
        "/v1/collections/notes/sources/upload%3Atides.json",
        None,
        None,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["removed_documents"], 1);
    let hits = req(
        a,
        "POST",
        "/v1/search",
        None,
        Some(&json!({"query": "spring tides", "collection": "notes", "k": 5})),
    )
    .json();
    assert!(!hits.to_string().contains("Spring tides"), "{hits}");
    req(
        a,
        "DELETE",
        "/v1/collections/notes/sources/upload%3Atides.json",
        None,
        None,
    )
    .problem(404, "not_found");

    // The job list has the tenant's jobs, newest first; its event stream ends in done.
    let jobs = req(a, "GET", "/v1/jobs", None, None).json();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 3, "{jobs}");
    let r = req(a, "GET", &format!("/v1/jobs/{id}/events"), None, None);
    let text = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        text.contains("event: job") && text.contains("\"indexed\""),
        "{text}"
    );
    let done = text
        .split("event: done\ndata: ")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let done: Value = serde_json::from_str(done.lines().next().unwrap()).unwrap();
    assert_eq!(done["state"], "indexed", "{text}");
}

#[test]
fn bad_uploads_get_clear_problems() {
    let s = server(loopback(), |_| {});
    let a = s.addr;
    let path = "/v1/collections/notes/documents";
    for (name, why) in [
        ("../escape.md", "plain file name"),
        ("sub/dir.md", "plain file name"),
        (".hidden.md", "dot"),
        ("program.exe", "supported extension"),
        ("noext", "supported extension"),
    ] {
        let r = multipart(a, path, None, &[(name, b"hello")]);
        let p = r.problem(400, "invalid_input");
        assert!(p["detail"].as_str().unwrap().contains(why), "{name}: {p}");
    }
    let r = multipart(a, path, None, &[("a.md", b"one"), ("a.md", b"two")]);
    r.problem(400, "invalid_input");
    let r = multipart(a, path, None, &[]);
    r.problem(400, "invalid_input");
    // Malformed multipart, wrong JSON, unknown fields, empty texts, bad names.
    let r = raw(
        a,
        b"POST /v1/collections/notes/documents HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: 9\r\n\r\nnot a mp!",
    );
    r.problem(400, "invalid_input");
    for body in [
        json!({"documents": "x"}),
        json!({"documents": [{"text": "x", "colour": 1}]}),
        json!({"documents": [{"text": "   "}]}),
        json!({"docs": []}),
        json!({"documents": [{"name": "../../etc/passwd", "text": "x"}]}),
    ] {
        req(a, "POST", path, None, Some(&body)).problem(400, "invalid_input");
    }
    req(
        a,
        "POST",
        "/v1/collections/Bad~Name/documents",
        None,
        Some(&json!({"documents": [{"text": "x"}]})),
    )
    .problem(400, "invalid_input");
    // A broken JSON file is accepted and fails in the job with a message naming it.
    let r = multipart(a, path, None, &[("broken.json", b"{\"text\": ")]);
    assert_eq!(r.status, 202);
    let done = wait_job(a, None, r.json()["id"].as_str().unwrap());
    assert_eq!(done["state"], "indexed", "{done}");
    assert_eq!(done["counts"]["failed"], 1, "{done}");
    assert_eq!(done["errors"][0]["file"], "broken.json", "{done}");
    let text = done.to_string();
    assert!(
        !text.contains(&s._tmp.path().display().to_string()),
        "{text}"
    );
    // The failed file left no source behind.
    let sources = req(a, "GET", "/v1/collections/notes/sources", None, None).json();
    assert_eq!(sources["sources"], json!([]), "{sources}");
    // Unknown and malformed job ids.
    for id in ["job_000000000000000000000000", "nope", "../jobs"] {
        req(a, "GET", &format!("/v1/jobs/{id}"), None, None).problem(404, "not_found");
    }
}

#[test]
fn another_tenants_jobs_documents_and_sources_are_not_found() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| {
        made = acme_and_globex(ks);
        let (k, _) = ks.create_key("acme", Scope::Read, "").unwrap();
        made.insert("acme-read".into(), k);
    });
    let a = s.addr;
    let acme = made["acme"].as_str();
    let globex = made["globex"].as_str();
    // A read key cannot upload.
    req(
        a,
        "POST",
        "/v1/collections/docs/documents",
        Some(&made["acme-read"]),
        Some(&json!({"documents": [{"text": "x"}]})),
    )
    .problem(403, "forbidden");
    let r = req(
        a,
        "POST",
        "/v1/collections/docs/documents",
        Some(acme),
        Some(
            &json!({"documents": [{"name": "secret", "text": "Acme's secret launch code is 4711."}]}),
        ),
    );
    let id = r.json()["id"].as_str().unwrap().to_string();
    let job = wait_job(a, Some(acme), &id);
    assert_eq!(job["state"], "indexed");
    let sources = req(a, "GET", "/v1/collections/docs/sources", Some(acme), None).json();
    let secret = sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "upload:secret.json")
        .unwrap_or_else(|| panic!("{sources}"))
        .clone();
    let doc = secret["documents"][0].as_str().unwrap();

    // globex has a `docs` collection of its own: none of acme's ids resolve in it.
    for (method, path) in [
        ("GET", format!("/v1/jobs/{id}")),
        ("POST", format!("/v1/jobs/{id}/cancel")),
        ("GET", format!("/v1/jobs/{id}/events")),
        ("GET", format!("/v1/collections/docs/documents/{doc}")),
        (
            "GET",
            "/v1/collections/docs/sources/upload%3Asecret.json".to_string(),
        ),
        (
            "GET",
            format!("/v1/collections/docs/documents/{doc}/chunks/0"),
        ),
        (
            "DELETE",
            "/v1/collections/docs/sources/upload%3Asecret.json".to_string(),
        ),
    ] {
        let r = req(a, method, &path, Some(globex), None);
        let p = r.problem(404, "not_found");
        assert!(!p.to_string().contains("4711"), "{p}");
    }
    for path in ["/v1/jobs", "/v1/collections/docs/sources"] {
        let text =
            String::from_utf8_lossy(&req(a, "GET", path, Some(globex), None).body).to_string();
        assert!(
            !text.contains(&id) && !text.contains("secret"),
            "{path}: {text}"
        );
    }
    // Still there for acme.
    let r = req(
        a,
        "GET",
        &format!("/v1/collections/docs/documents/{doc}"),
        Some(acme),
        None,
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_cancelled_job_stops_and_keeps_what_it_finished() {
    let s = server(loopback(), |_| {});
    let a = s.addr;
    // Enough files that the job is still running when the cancel arrives.
    let texts: Vec<Value> = (0..400)
        .map(|i| json!({"name": format!("n{i:03}"), "text": format!("Note {i}: the tide table of harbour {i} lists {} high waters in a lunar month, and the pilot of harbour {i} checks them every morning before the ferries leave.", 50 + i)}))
        .collect();
    let r = req(
        a,
        "POST",
        "/v1/collections/many/documents",
        None,
        Some(&json!({ "documents": texts })),
    );
    let id = r.json()["id"].as_str().unwrap().to_string();
    // Wait for the job to start, then cancel it.
    let start = Instant::now();
    loop {
        let j = req(a, "GET", &format!("/v1/jobs/{id}"), None, None).json();
        if j["counts"]["files_done"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{j}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = req(a, "POST", &format!("/v1/jobs/{id}/cancel"), None, None);
    assert_eq!(r.status, 200);
    let done = wait_job(a, None, &id);
    if done["state"] == "indexed" {
        // The machine finished all 400 before the cancel landed: nothing to check.
        eprintln!("the job finished before it could be cancelled");
        return;
    }
    assert_eq!(done["state"], "cancelled", "{done}");
    let finished = done["counts"]["files_done"].as_u64().unwrap();
    assert!(finished < 400, "{done}");
    // Exactly the finished files are sources; the rest left nothing behind.
    let sources = req(a, "GET", "/v1/collections/many/sources", None, None).json();
    assert_eq!(
        sources["sources"].as_array().unwrap().len() as u64,
        finished,
        "{done}"
    );
    // A cancelled job stays cancelled.
    let again = req(a, "POST", &format!("/v1/jobs/{id}/cancel"), None, None).json();
    assert_eq!(again["state"], "cancelled");
}

#[test]
fn a_failed_reupload_keeps_the_earlier_version() {
    let s = server(loopback(), |_| {});
    let a = s.addr;
    let path = "/v1/collections/notes/documents";
    let good = br#"{"title": "Tides", "text": "Spring tides follow the new and the full Moon."}"#;
    let r = multipart(a, path, None, &[("tides.json", good)]);
    assert_eq!(
        wait_job(a, None, r.json()["id"].as_str().unwrap())["state"],
        "indexed"
    );
    // The same name again, unreadable: the job reports it, the earlier file stays.
    let r = multipart(a, path, None, &[("tides.json", b"{\"text\": ")]);
    let done = wait_job(a, None, r.json()["id"].as_str().unwrap());
    assert_eq!(done["counts"]["failed"], 1, "{done}");
    let on_disk = s._tmp.path().join("data/sources/notes/tides.json");
    assert_eq!(std::fs::read(&on_disk).unwrap(), good);
    let hits = req(
        a,
        "POST",
        "/v1/search",
        None,
        Some(&json!({"query": "spring tides", "collection": "notes", "k": 3})),
    )
    .json();
    assert!(hits.to_string().contains("Spring tides"), "{hits}");
    // A good new version replaces it.
    let newer = br#"{"title": "Tides", "text": "Neap tides come with the quarter Moons."}"#;
    let r = multipart(a, path, None, &[("tides.json", newer)]);
    assert_eq!(
        wait_job(a, None, r.json()["id"].as_str().unwrap())["state"],
        "indexed"
    );
    assert_eq!(std::fs::read(&on_disk).unwrap(), newer);
    // Deleting the collection deletes its uploads.
    assert_eq!(
        req(a, "DELETE", "/v1/collections/notes", None, None).status,
        204
    );
    assert!(!on_disk.exists());
}

#[test]
fn a_reupload_that_fails_after_some_of_its_batches_leaves_the_earlier_version_whole() {
    // Batches of 20 chunks: a file of 100 rows commits in several before it fails.
    let s = server_configured(loopback(), |c| c.ingest.commit_chunks = 20, |_| {});
    let a = s.addr;
    let path = "/v1/collections/birds/documents";
    let rows = |from: usize, to: usize, bird: &str| -> Vec<u8> {
        (from..to)
            .map(|i| format!("{{\"_id\":\"{i}\",\"text\":\"Sighting {i}: a {bird}.\"}}\n"))
            .collect::<String>()
            .into_bytes()
    };
    let count = |q: &str| -> usize {
        req(
            a,
            "POST",
            "/v1/search",
            None,
            Some(&json!({"query": q, "collection": "birds", "k": 100, "mode": "keyword"})),
        )
        .json()["hits"]
            .as_array()
            .unwrap()
            .len()
    };
    let sources = || -> Value {
        req(a, "GET", "/v1/collections/birds/sources", None, None).json()["sources"].clone()
    };
    let good = rows(0, 100, "heron");
    let r = multipart(a, path, None, &[("log.jsonl", &good)]);
    assert_eq!(
        wait_job(a, None, r.json()["id"].as_str().unwrap())["state"],
        "indexed"
    );
    assert_eq!(count("heron"), 100);

    // Version 2: 100 rows of egrets, then a broken line.
    let mut bad = rows(0, 100, "egret");
    bad.extend_from_slice(b"{broken\n");
    let r = multipart(a, path, None, &[("log.jsonl", &bad)]);
    let done = wait_job(a, None, r.json()["id"].as_str().unwrap());
    assert_eq!(done["counts"]["failed"], 1, "{done}");
    // The upload failed: the collection is as it was, nothing partial, no egret.
    assert_eq!(count("egret"), 0);
    assert_eq!(count("heron"), 100);
    let list = sources();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["partial"], false, "{list}");
    let on_disk = s._tmp.path().join("data/sources/birds/log.jsonl");
    assert_eq!(std::fs::read(&on_disk).unwrap(), good);

    // A first upload that fails the same way leaves nothing of it.
    let r = multipart(a, path, None, &[("other.jsonl", &bad)]);
    let done = wait_job(a, None, r.json()["id"].as_str().unwrap());
    assert_eq!(done["counts"]["failed"], 1, "{done}");
    assert_eq!(count("egret"), 0);
    assert_eq!(sources().as_array().unwrap().len(), 1);
}

/// An ask as an event stream, read to its end: the raw text of every event.
fn ask_stream(addr: SocketAddr, key: &str, question: &str, collection: &str) -> String {
    let body = json!({"question": question, "collection": collection}).to_string();
    let r = raw(
        addr,
        format!(
            "POST /v1/ask HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(text.contains("event: done"), "{text}");
    text
}

#[test]
fn two_tenants_uploading_remembering_and_streaming_at_once_never_see_each_other() {
    let mut made = HashMap::new();
    let s = server(loopback(), |ks| made = acme_and_globex(ks));
    let a = s.addr;
    // Each tenant's secret word, and the other's it must never be shown.
    let cases = [
        ("acme", made["acme"].clone(), "zanzibarite", "quokkaphone"),
        (
            "globex",
            made["globex"].clone(),
            "quokkaphone",
            "zanzibarite",
        ),
    ];
    // Each asks about its own word only: whatever of the other's shows was leaked (with
    // a handful of documents per tenant, vector search returns every one it can see).
    let question = |mine: &str| format!("Which instrument is the {mine}?");
    let mut handles = Vec::new();
    for (tenant, key, mine, theirs) in cases.clone() {
        // Uploads: three jobs, one after another, each checked while the other tenant
        // works.
        let k = key.clone();
        handles.push(std::thread::spawn(move || {
            let mut ids = Vec::new();
            for i in 0..3 {
                let body = json!({"documents": [{"name": format!("{tenant}-{i}"), "title": format!("{mine} {i}"),
                    "text": format!("The {mine} is a brass instrument of the {tenant} band, number {i}. It is played at dawn.")}]});
                let r = req(a, "POST", "/v1/collections/notes/documents", Some(&k), Some(&body));
                assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
                let id = r.json()["id"].as_str().unwrap().to_string();
                let j = wait_job(a, Some(&k), &id);
                assert_eq!(j["state"], "indexed", "{j}");
                ids.push(id);
                let list = req(a, "GET", "/v1/jobs", Some(&k), None);
                let text = String::from_utf8_lossy(&list.body).into_owned();
                assert!(!text.contains(theirs), "jobs leaked {theirs}: {text}");
                for id in &ids {
                    assert!(text.contains(id.as_str()), "{id} missing: {text}");
                }
            }
            ids
        }));
        // Memories: add, search, list, at the same time.
        let k = key.clone();
        let q = question(mine);
        handles.push(std::thread::spawn(move || {
            let mut ids = Vec::new();
            for i in 0..4 {
                let r = req(
                    a,
                    "POST",
                    "/v1/memories",
                    Some(&k),
                    Some(&json!({"text": format!("The {mine} needs tuning every {} days.", i + 2), "kind": "fact"})),
                );
                assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
                ids.push(r.json()["memory"]["id"].as_str().unwrap().to_string());
                for (path, body) in [
                    ("/v1/memories/search", Some(json!({"query": q, "k": 20}))),
                    ("/v1/memories", None),
                ] {
                    let r = match &body {
                        Some(b) => req(a, "POST", path, Some(&k), Some(b)),
                        None => req(a, "GET", path, Some(&k), None),
                    };
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                    let text = String::from_utf8_lossy(&r.body);
                    assert!(!text.contains(theirs), "{path} leaked {theirs}: {text}");
                    assert!(text.contains(mine), "{path} lost {mine}: {text}");
                }
            }
            ids
        }));
        // Asks streamed while the others write.
        let k = key.clone();
        let q = question(mine);
        handles.push(std::thread::spawn(move || {
            let (start, mut asked, mut answered) = (Instant::now(), 0, false);
            while asked < 4 {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "no collection to ask"
                );
                let r = req(a, "GET", "/v1/collections", Some(&k), None);
                if !String::from_utf8_lossy(&r.body).contains("notes") {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let text = ask_stream(a, &k, &q, "notes");
                assert!(!text.contains(theirs), "the stream leaked {theirs}: {text}");
                answered |= text.contains("event: answer") && text.contains(mine);
                asked += 1;
            }
            // Once its documents are in (the upload jobs may still be running under a
            // loaded machine), the stream answers from them.
            while !answered {
                let text = ask_stream(a, &k, &q, "notes");
                assert!(!text.contains(theirs), "the stream leaked {theirs}: {text}");
                answered = text.contains("event: answer") && text.contains(mine);
                assert!(
                    answered || start.elapsed() < Duration::from_secs(60),
                    "{text}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            Vec::new()
        }));
    }
    let mut owned: Vec<Vec<String>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Afterwards each tenant's ids answer 404 to the other: jobs and memories.
    let (acme_jobs, acme_mems) = (owned.remove(0), owned.remove(0));
    let (globex_jobs, globex_mems) = (owned.remove(1), owned.remove(1));
    for (key, jobs, mems) in [
        (&made["globex"], &acme_jobs, &acme_mems),
        (&made["acme"], &globex_jobs, &globex_mems),
    ] {
        assert!(!jobs.is_empty() && !mems.is_empty());
        for id in jobs {
            req(a, "GET", &format!("/v1/jobs/{id}"), Some(key), None).problem(404, "not_found");
        }
        for id in mems {
            req(a, "GET", &format!("/v1/memories/{id}"), Some(key), None).problem(404, "not_found");
        }
    }
    // And each tenant's search finds its own word only.
    for (_, key, mine, theirs) in cases {
        let r = req(
            a,
            "POST",
            "/v1/search",
            Some(&key),
            Some(
                &json!({"query": question(mine), "collection": "notes", "k": 20, "mode": "hybrid"}),
            ),
        );
        let text = String::from_utf8_lossy(&r.body);
        assert!(text.contains(mine) && !text.contains(theirs), "{text}");
    }
}
