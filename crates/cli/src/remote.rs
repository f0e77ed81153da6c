//! The CLI against a running server (`--server URL`, or `NEURALCORE_SERVER`): `search`,
//! `ask`, `ingest` and `memory …` call its HTTP API (`docs/api.md`) as the key's tenant
//! (`--api-key`, or `NEURALCORE_API_KEY`) and print what the same commands print over a
//! local data dir.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use neuralcore_agents::{AskReport, LoopEvent};
use neuralcore_app::SearchResponse;
use neuralcore_memory::{Kind, Memory, Relation};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::memory::MemoryCommand;

/// Largest request body an upload batch is cut to (the server's default limit is
/// 64 MiB; a single larger file goes alone and the server says whether it fits).
const BATCH_BYTES: usize = 16 * 1024 * 1024;

/// How often a job's state is read while waiting for it.
const POLL: Duration = Duration::from_millis(200);

/// A running neuralcore server.
pub struct Remote {
    base: String,
    key: Option<String>,
    agent: ureq::Agent,
}

/// Percent-encodes one path segment or query value.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `?k=v&…` of the values that are set.
fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let q: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", enc(v))))
        .collect();
    if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    }
}

impl Remote {
    /// The server at `url` (`http://host:port`), called with `key` when given.
    pub fn new(url: &str, key: Option<String>) -> Result<Remote> {
        let base = url.trim().trim_end_matches('/').to_string();
        let ok = (base.starts_with("http://") || base.starts_with("https://"))
            && base
                .parse::<ureq::http::Uri>()
                .is_ok_and(|u| u.host().is_some());
        if !ok {
            bail!("--server {url:?}: give the server's URL, e.g. http://127.0.0.1:7700");
        }
        if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            bail!("--api-key is empty");
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(5)))
            .user_agent(concat!("neuralcore-cli/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Remote {
            base,
            key,
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// Sends a request; a non-2xx answer becomes the error its problem document
    /// describes.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        accept: &str,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let url = format!("{}{path}", self.base);
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Accept", accept);
        if let Some(k) = &self.key {
            req = req.header("Authorization", format!("Bearer {}", k.trim()));
        }
        let resp = match body {
            Some((ctype, bytes)) => {
                let req = req.header("Content-Type", ctype).body(bytes)?;
                self.agent.run(req)
            }
            None => self.agent.run(req.body(())?),
        }
        .map_err(|e| anyhow::anyhow!("cannot reach the neuralcore server at {}: {e}", self.base))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let mut bytes = Vec::new();
        let _ = resp
            .into_body()
            .as_reader()
            .take(64 * 1024)
            .read_to_end(&mut bytes);
        let problem: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let detail = problem["detail"]
            .as_str()
            .or(problem["title"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_string());
        bail!("{detail} (HTTP {status} from {method} {path})")
    }

    /// A JSON answer to `method path` with a JSON `body`.
    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T> {
        let body = body.map(|b| ("application/json", compact(b).to_string().into_bytes()));
        let resp = self.send(method, path, body, "application/json")?;
        let bytes = resp
            .into_body()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_vec()
            .with_context(|| format!("reading the answer to {method} {path}"))?;
        serde_json::from_slice(&bytes).with_context(|| {
            format!("the server's answer to {method} {path} is not what this CLI reads")
        })
    }
}

/// `v` without its top-level nulls (an option left unset is a field left out).
fn compact(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        v => v.clone(),
    }
}

/// `backup` by the server: written to `<its data dir>/backups/<name>`.
pub fn backup(r: &Remote, name: &str) -> Result<neuralcore_app::backup::BackupManifest> {
    let body = serde_json::json!({ "name": name });
    r.call("POST", "/v1/admin/backup", Some(&body))
}

/// `search` on the server.
pub fn search(r: &Remote, json: bool, quiet: bool, body: Value, full: bool) -> Result<ExitCode> {
    let res: SearchResponse = r.call("POST", "/v1/search", Some(&body))?;
    if let Some(why) = &res.fallback {
        if !quiet {
            eprintln!("note: keyword-only search: {why}");
        }
    }
    crate::output::print_search(json, None, &[], &res, full)?;
    Ok(ExitCode::SUCCESS)
}

/// `ask` on the server: the report as JSON, or with `--trace` / `--stream` the loop's
/// events as the server streams them, printed as they come.
pub fn ask(r: &Remote, json: bool, args: crate::ask::AskArgs) -> Result<ExitCode> {
    if args.run_id.is_some() {
        bail!("--run-id is not available with --server: the server names its runs");
    }
    let o = &args.opts;
    let body = json!({
        "question": args.question,
        "collection": o.collection,
        "session": o.session,
        "memory": args.memory,
        "project": o.project,
        "max_iterations": o.max_iterations,
        "deadline_ms": o.deadline_ms,
        "switches": {
            "no_retrieval": o.switches.no_retrieval,
            "no_grade": o.switches.no_grade,
            "no_verify": o.switches.no_verify,
            "no_refine": o.switches.no_refine,
            "no_reflect": o.switches.no_reflect,
        },
    });
    let trace = args.trace && !json;
    if !trace && !args.stream {
        let report: AskReport = r.call("POST", "/v1/ask", Some(&body))?;
        crate::ask::print(json, false, &report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let sink = crate::ask::sink(trace, args.stream).expect("trace or stream");
    if trace {
        println!("── question: {}", args.question.trim());
    }
    let resp = r.send(
        "POST",
        "/v1/ask",
        Some(("application/json", compact(&body).to_string().into_bytes())),
        "text/event-stream",
    )?;
    let mut lines = BufReader::new(resp.into_body().into_reader());
    let (mut name, mut data, mut line) = (String::new(), String::new(), String::new());
    let mut report: Option<AskReport> = None;
    let mut drafted = false;
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            bail!("the server closed the ask stream before it was done");
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if let Some(n) = l.strip_prefix("event:") {
            name = n.trim().to_string();
        } else if let Some(d) = l.strip_prefix("data:") {
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        } else if l.is_empty() && !name.is_empty() {
            let v: Value = serde_json::from_str(&data)
                .with_context(|| format!("the server's {name:?} event is not JSON"))?;
            data.clear();
            match std::mem::take(&mut name).as_str() {
                "accepted" => {}
                "report" => report = Some(serde_json::from_value(v["report"].clone())?),
                "error" => bail!(
                    "{}",
                    v["detail"]
                        .as_str()
                        .unwrap_or("the server could not answer")
                ),
                "done" => break,
                // The loop's events; kinds this CLI does not know are skipped.
                _ => {
                    if let Ok(e) = serde_json::from_value::<LoopEvent>(v) {
                        drafted |= matches!(e, LoopEvent::Delta { .. });
                        sink(&e);
                    }
                }
            }
        }
    }
    let report = report.context("the ask stream ended without a report")?;
    if args.stream && drafted {
        eprintln!();
    }
    crate::ask::print(json, trace, &report)?;
    Ok(ExitCode::SUCCESS)
}

/// `ingest` on the server: the files found under `paths` are uploaded (in batches of
/// at most 16 MiB), each batch an ingest job the CLI follows to its end.
pub fn ingest(
    r: &Remote,
    json: bool,
    quiet: bool,
    paths: &[PathBuf],
    collection: &str,
    walk: &neuralcore_ingest::walk::WalkOptions,
) -> Result<ExitCode> {
    use neuralcore_ingest::walk::WalkEntry;
    let mut failed = 0usize;
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for e in neuralcore_ingest::walk::walk(paths, walk).map_err(anyhow::Error::msg)? {
        match e {
            WalkEntry::File(p) => {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                files.push((name, p));
            }
            WalkEntry::Error(p, why) => {
                eprintln!("error: {}: {why}", p.display());
                failed += 1;
            }
        }
    }
    // The server stores uploads by file name: two files of one name in one run would
    // replace each other.
    let mut seen: std::collections::HashMap<&str, &Path> = Default::default();
    for (name, p) in &files {
        if let Some(first) = seen.insert(name, p) {
            bail!(
                "{} and {} have the same file name: the server keeps uploads by name, \
                 so ingest them into different collections or rename one",
                first.display(),
                p.display()
            );
        }
    }
    let mut batches: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    let mut size = 0usize;
    for (name, p) in files {
        if let Err(e) = neuralcore_app::jobs::check_upload_name(&name) {
            eprintln!("error: {}: {}", p.display(), e);
            failed += 1;
            continue;
        }
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {}: {e}", p.display());
                failed += 1;
                continue;
            }
        };
        if batches.is_empty() || size + bytes.len() > BATCH_BYTES {
            batches.push(Vec::new());
            size = 0;
        }
        size += bytes.len();
        batches.last_mut().expect("a batch").push((name, bytes));
    }
    let mut jobs: Vec<Value> = Vec::new();
    for batch in batches {
        let (ctype, body) = multipart(&batch);
        let path = format!("/v1/collections/{}/documents", enc(collection));
        let resp = r.send("POST", &path, Some((&ctype, body)), "application/json")?;
        let job: Value = serde_json::from_reader(resp.into_body().into_reader())?;
        let id = job["id"]
            .as_str()
            .context("the server's job has no id")?
            .to_string();
        let mut last_stage = String::new();
        let job = loop {
            let job: Value = r.call("GET", &format!("/v1/jobs/{}", enc(&id)), None)?;
            let state = job["state"].as_str().unwrap_or("").to_string();
            if !quiet && !json && state != last_stage {
                eprintln!("job {id}: {state}");
                last_stage = state.clone();
            }
            if matches!(state.as_str(), "indexed" | "failed" | "cancelled") {
                break job;
            }
            std::thread::sleep(POLL);
        };
        jobs.push(job);
    }
    for j in &jobs {
        let c = &j["counts"];
        failed += c["failed"].as_u64().unwrap_or(0) as usize;
        if j["state"] != "indexed" {
            failed += 1;
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "collection": collection, "jobs": jobs }))?
        );
    } else {
        let sum = |k: &str| -> u64 {
            jobs.iter()
                .map(|j| j["counts"][k].as_u64().unwrap_or(0))
                .sum()
        };
        for j in &jobs {
            for e in j["errors"].as_array().into_iter().flatten() {
                eprintln!(
                    "error: {}: {}",
                    e["file"].as_str().unwrap_or("?"),
                    e["message"].as_str().unwrap_or("?")
                );
            }
            if let Some(why) = j["error"].as_str() {
                eprintln!("error: job {}: {why}", j["id"].as_str().unwrap_or("?"));
            }
        }
        if !quiet {
            println!(
                "{} file(s) into {collection} on the server: {} ingested, {} unchanged, {} failed; {} documents, {} chunks",
                sum("files"),
                sum("ingested"),
                sum("skipped"),
                sum("failed"),
                sum("documents"),
                sum("chunks"),
            );
        }
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A `multipart/form-data` body of `files`: (content type, body).
fn multipart(files: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let boundary = format!("neuralcore-{nanos:x}-{}", std::process::id());
    let mut body = Vec::new();
    for (name, bytes) in files {
        // Names were checked plain (no controls, no slashes); quotes are escaped.
        let name = name.replace('"', "%22");
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
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// `memory …` on the server.
pub fn memory(r: &Remote, json: bool, what: MemoryCommand) -> Result<ExitCode> {
    use crate::memory::{
        parse_entity_kind, parse_kind, parse_relation, parse_signal, show, show_audit, show_hits,
        show_list, show_related, show_with_relations,
    };
    let print = |v: &Value| -> Result<()> {
        println!("{}", serde_json::to_string_pretty(v)?);
        Ok(())
    };
    let path_of = |id: &str, rest: &str| format!("/v1/memories/{}{rest}", enc(id));
    match what {
        MemoryCommand::Add {
            text,
            kind,
            project,
            session,
            agent,
            source,
            occurred_at,
        } => {
            let kind = parse_kind(&kind)?;
            let body = json!({"text": text, "kind": kind, "project": project, "session": session,
                "agent": agent, "source": source, "occurred_at": occurred_at});
            let v: Value = r.call("POST", "/v1/memories", Some(&body))?;
            if json {
                let mut out = v["memory"].clone();
                out["entities"] = v["entities"].clone();
                out["entities_by"] = v["entities_by"].clone();
                print(&out)?;
            } else {
                println!("{}", v["memory"]["id"].as_str().unwrap_or(""));
                let names: Vec<String> = v["entities"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        format!(
                            "{} ({})",
                            e["name"].as_str().unwrap_or(""),
                            e["kind"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                if !names.is_empty() {
                    eprintln!(
                        "mentions: {} [{}]",
                        names.join(", "),
                        v["entities_by"].as_str().unwrap_or("")
                    );
                }
            }
        }
        MemoryCommand::Graph { entity, kind } => {
            if let Some(k) = &kind {
                parse_entity_kind(k)?;
            }
            let q = query(&[("entity", Some(&entity)), ("kind", kind.as_deref())]);
            let v: Value = r.call("GET", &format!("/v1/memory/graph{q}"), None)?;
            let found: Vec<neuralcore_memory::graph::Neighbourhood> =
                serde_json::from_value(v["entities"].clone())?;
            if json {
                print(&serde_json::to_value(&found)?)?;
            } else if found.is_empty() {
                eprintln!("no memory mentions {entity}");
                return Ok(ExitCode::from(1));
            } else {
                for nb in &found {
                    println!("{}: {} memories", nb.node, nb.memories.len());
                    for id in &nb.memories {
                        if let Ok(v) = r.call::<Value>("GET", &path_of(id, ""), None) {
                            show(&serde_json::from_value::<Memory>(v["memory"].clone())?);
                        }
                    }
                    show_related(&nb.related);
                }
            }
        }
        MemoryCommand::Get { id } => {
            let v: Value = r.call("GET", &path_of(&id, ""), None)?;
            if json {
                print(&v)?;
            } else {
                let m: Memory = serde_json::from_value(v["memory"].clone())?;
                let rels: Vec<Relation> = serde_json::from_value(v["relations"].clone())?;
                show_with_relations(&m, &rels);
            }
        }
        MemoryCommand::Search {
            query,
            k,
            project,
            session,
            include_superseded,
        } => {
            let body = json!({"query": query, "k": k, "project": project,
                "session": session, "include_superseded": include_superseded});
            let v: Value = r.call("POST", "/v1/memories/search", Some(&body))?;
            if json {
                print(&v["hits"])?;
            } else {
                let hits: Vec<neuralcore_memory::MemHit> =
                    serde_json::from_value(v["hits"].clone())?;
                show_hits(&hits);
            }
        }
        MemoryCommand::List {
            status,
            project,
            session,
            kind,
        } => {
            let kind = kind
                .map(|k| Kind::parse(&k).with_context(|| format!("unknown kind {k:?}")))
                .transpose()?;
            let q = query(&[
                ("status", Some(&status)),
                ("project", Some(project.as_str()).filter(|p| !p.is_empty())),
                ("session", Some(session.as_str()).filter(|s| !s.is_empty())),
                ("kind", kind.map(|k| k.as_str())),
            ]);
            let v: Value = r.call("GET", &format!("/v1/memories{q}"), None)?;
            if json {
                print(&v["memories"])?;
            } else {
                let ms: Vec<Memory> = serde_json::from_value(v["memories"].clone())?;
                show_list(&ms);
            }
        }
        // The server records the key's tenant and prefix as who signalled.
        MemoryCommand::Signal {
            id,
            signal,
            by: _,
            query,
        } => {
            let s = parse_signal(&signal)?;
            let v: Value = r.call(
                "POST",
                &path_of(&id, "/signal"),
                Some(&json!({"signal": s, "query": query})),
            )?;
            one(json, &v)?;
        }
        MemoryCommand::Link { from, kind, to } => {
            let k = parse_relation(&kind)?;
            let v: Value = r.call(
                "POST",
                &path_of(&from, "/links"),
                Some(&json!({"kind": k, "to": to})),
            )?;
            if json {
                print(&v)?;
            } else {
                let rel: Relation = serde_json::from_value(v)?;
                println!("{} {} {}", rel.from, rel.kind.as_str(), rel.to);
            }
        }
        MemoryCommand::Forget { id } => {
            let v: Value = r.call("POST", &path_of(&id, "/forget"), None)?;
            one(json, &v)?;
        }
        MemoryCommand::Restore { id } => {
            let v: Value = r.call("POST", &path_of(&id, "/restore"), None)?;
            one(json, &v)?;
        }
        MemoryCommand::Sweep => {
            bail!(
                "memory sweep runs on the data dir: run it where the server runs, without --server"
            )
        }
        MemoryCommand::Audit { id } => {
            let v: Value = r.call("GET", &path_of(&id, "/audit"), None)?;
            if json {
                print(&v["audit"])?;
            } else {
                let a: Vec<neuralcore_memory::AuditEntry> =
                    serde_json::from_value(v["audit"].clone())?;
                show_audit(&a);
            }
        }
        MemoryCommand::Tiers {
            session,
            project,
            query: q,
        } => {
            let qs = query(&[
                ("session", Some(session.as_str()).filter(|s| !s.is_empty())),
                ("project", Some(project.as_str()).filter(|p| !p.is_empty())),
                ("query", q.as_deref()),
            ]);
            let v: Value = r.call("GET", &format!("/v1/memory/tiers{qs}"), None)?;
            if json {
                print(&v)?;
            } else {
                let t: neuralcore_memory::tiers::Tiers = serde_json::from_value(v)?;
                print!("{}", t.render());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One memory, as JSON or as `memory get` shows it.
fn one(json: bool, v: &Value) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        crate::memory::show(&serde_json::from_value::<Memory>(v.clone())?);
    }
    Ok(())
}
