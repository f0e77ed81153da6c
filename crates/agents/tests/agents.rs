//! Tools, agents and the orchestrator over a real engine (the embedded store in a
//! temporary data dir, the real all-MiniLM-L6-v2 model) and an in-memory Mind.
//!
//! The drop-in test adds a native tool in *this* file (one `register_tool!`) and an
//! agent markdown file in a copy of the repository's `agents/` folder; nothing else
//! changes, and its chunks appear in the fused results.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_agents::{
    final_chunks, parse, AgentLoader, ChunkList, CostClass, Orchestrator, Output, Registry,
    Services, Tool, ToolContext, ToolError, ToolSpec, RETRIEVAL_ROLES,
};
use neuralcore_engine::{Config, Engine, ScoredChunk};
use neuralcore_mind::Mind;
use serde_json::json;

/// A native tool that exists only in this test: chunks whose document title contains a
/// word of the query.
struct TitleSearch(ToolSpec);

impl Default for TitleSearch {
    fn default() -> Self {
        TitleSearch(ToolSpec {
            name: "title_search",
            namespace: "titles",
            description: "chunks whose document title shares a word with the query (test)",
            roles: &["retrieve"],
            reads: &["input.query", "input.collection"],
            writes: &["chunks"],
            params: || json!({"type": "object"}),
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for TitleSearch {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let q = ctx.mind.read("input.query")?.unwrap().value;
        let q = q.as_str().unwrap().to_lowercase();
        let c = "default";
        let store = ctx.services.engine.store();
        let mut hits = Vec::new();
        for d in store
            .document_keys(c)
            .map_err(|e| ToolError::Permanent(e.to_string()))?
        {
            let doc = store.document(c, d).unwrap().unwrap();
            if q.split_whitespace()
                .any(|w| doc.title.to_lowercase().contains(w))
            {
                hits.push(ScoredChunk {
                    doc: d,
                    ordinal: 0,
                    score: 1.0,
                });
            }
        }
        let e = ctx.write(
            "chunks",
            ChunkList::new("retrieve", &q, c, &hits).to_value(),
        )?;
        Ok(Output::wrote(vec![e.key], format!("{} chunks", hits.len())))
    }
}

neuralcore_agents::register_tool!(TitleSearch);

fn repo_agents() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agents")
}

fn model_cache() -> String {
    neuralcore_models::testing::model_cache()
        .display()
        .to_string()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    agents: PathBuf,
    services: Services,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("zebra.md"),
        "# Zebra migration\n\nEvery year the herds cross the Mara river.",
    )
    .unwrap();
    std::fs::write(
        docs.join("tides.md"),
        "# Tides\n\nThe pull of the Moon raises the sea twice a day.",
    )
    .unwrap();
    std::fs::write(
        docs.join("bread.md"),
        "# Bread\n\nYeast makes dough rise before baking.",
    )
    .unwrap();
    let mut cfg = Config::default();
    cfg.embedding.model_dir = model_cache();
    let engine = Engine::open(&tmp.path().join("data"), cfg).unwrap();
    engine.ingest(&[docs], "default", &mut ()).unwrap();
    let agents = tmp.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    for e in std::fs::read_dir(repo_agents()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, agents.join(p.file_name().unwrap())).unwrap();
    }
    Fixture {
        _tmp: tmp,
        agents,
        services: Services::new(Arc::new(engine)),
    }
}

fn orchestrator(f: &Fixture) -> Orchestrator {
    let registry = Registry::discover().unwrap();
    Orchestrator {
        loader: Arc::new(AgentLoader::new(vec![f.agents.clone()], registry.clone())),
        registry,
        mind: Mind::memory(),
        services: f.services.clone(),
    }
}

fn titles(f: &Fixture, hits: &[ScoredChunk]) -> Vec<String> {
    hits.iter()
        .map(|h| {
            f.services
                .engine
                .store()
                .document("default", h.doc)
                .unwrap()
                .unwrap()
                .title
        })
        .collect()
}

#[test]
fn the_registry_finds_every_tool_without_a_list() {
    let r = Registry::discover().unwrap();
    for name in [
        "keyword_search",
        "vector_search",
        "fusion",
        "rerank",
        "title_search",
    ] {
        assert!(r.get(name).is_some(), "{name} missing");
    }
    let retrievers: Vec<&str> = r
        .for_role("retrieve")
        .iter()
        .map(|t| t.spec().name)
        .collect();
    assert!(retrievers.contains(&"keyword_search") && retrievers.contains(&"vector_search"));
    let producers: Vec<&str> = r
        .producing("*.chunks")
        .iter()
        .map(|t| t.spec().name)
        .collect();
    assert!(producers.len() >= 5, "{producers:?}");
    assert_eq!(r.producing("fusion.*")[0].spec().name, "fusion");
    // Without `*`, a pattern is one exact key (the Mind's `glob_match`), never a prefix.
    assert_eq!(r.producing("fusion.chunks")[0].spec().name, "fusion");
    assert!(r.producing("fusion").is_empty());
    assert!(r.producing("fusion.chunk").is_empty());
}

#[test]
fn the_shipped_agents_load_and_map_roles_to_tools() {
    let loader = AgentLoader::new(vec![repo_agents()], Registry::discover().unwrap());
    assert!(loader.errors().is_empty(), "{:?}", loader.errors());
    let role = |r: &str| -> Vec<String> {
        loader
            .for_role(r)
            .iter()
            .map(|a| a.def().name.clone())
            .collect()
    };
    assert_eq!(
        role("retrieve"),
        ["graph-retriever", "keyword-retriever", "vector-retriever"]
    );
    assert_eq!(role("fuse"), ["fusion"]);
    assert_eq!(role("rerank"), ["reranker"]);
    // Every stage of the control loop has its agent file.
    for (r, agent) in [
        ("decide", "decider"),
        ("plan", "planner"),
        ("grade", "grader"),
        ("verify", "verifier"),
        ("refine", "refiner"),
        ("generate", "generator"),
        ("check", "checker"),
        ("reflect", "reflector"),
    ] {
        assert_eq!(role(r), [agent], "{r}");
    }
}

#[test]
fn retrieval_runs_through_the_blackboard_and_namespaces_never_collide() {
    let f = fixture();
    let o = orchestrator(&f);
    let report = o
        .run(
            "r1",
            "when do herds cross the river",
            "default",
            RETRIEVAL_ROLES,
            None,
        )
        .unwrap();
    assert_eq!(report.roles.len(), 3);
    let scope = o.mind.run("r1").unwrap();
    let kw = scope.read("keyword.chunks").unwrap().unwrap();
    let vec = scope.read("vector.chunks").unwrap().unwrap();
    assert_ne!(kw.value, vec.value, "two tools, two keys, two lists");
    assert!(kw.writer.contains("keyword-retriever"));
    let (key, hits) = final_chunks(&scope).unwrap().unwrap();
    // No reranker model: the reranker agent is skipped, fusion's list is final.
    assert_eq!(key, "fusion.chunks");
    assert_eq!(titles(&f, &hits)[0], "Zebra migration");
    // Another run does not see this one's keys.
    let other = o.mind.run("r2").unwrap();
    assert!(other.read("keyword.chunks").unwrap().is_none());
}

#[test]
fn dropping_in_one_markdown_file_adds_a_capability() {
    let f = fixture();
    let o = orchestrator(&f);
    // Without an agent file the test tool is registered but takes no part.
    o.run("before", "bread", "default", RETRIEVAL_ROLES, None)
        .unwrap();
    assert!(o
        .mind
        .run("before")
        .unwrap()
        .read("titles.chunks")
        .unwrap()
        .is_none());
    std::fs::write(
        f.agents.join("title-retriever.md"),
        "---\nname: title-retriever\nrole: retrieve\ntools: [title_search]\n---\nTitles.\n",
    )
    .unwrap();
    assert!(o.loader.reload());
    // "tides" matches a title but shares no term with the other documents' bodies.
    o.run("after", "tides", "default", RETRIEVAL_ROLES, None)
        .unwrap();
    let scope = o.mind.run("after").unwrap();
    assert!(scope.read("titles.chunks").unwrap().is_some());
    let fused: ChunkList =
        serde_json::from_value(scope.read("fusion.chunks").unwrap().unwrap().value).unwrap();
    let from_titles: ChunkList =
        serde_json::from_value(scope.read("titles.chunks").unwrap().unwrap().value).unwrap();
    for c in &from_titles.chunks {
        assert!(
            fused.chunks.iter().any(|x| x.doc == c.doc),
            "fused lacks {c:?}"
        );
    }
    let report = o
        .mind
        .run("after")
        .unwrap()
        .read("agents.fusion")
        .unwrap()
        .unwrap();
    assert!(report.value["message"].as_str().unwrap().contains("titles"));
}

#[test]
fn disabling_or_deleting_an_agent_breaks_nothing_else() {
    let f = fixture();
    let o = orchestrator(&f);
    let vec_file = f.agents.join("vector-retriever.md");
    let text = std::fs::read_to_string(&vec_file).unwrap();
    std::fs::write(
        &vec_file,
        text.replace("role: retrieve", "enabled: false\nrole: retrieve"),
    )
    .unwrap();
    o.loader.reload();
    o.run("off", "river herds", "default", RETRIEVAL_ROLES, None)
        .unwrap();
    let scope = o.mind.run("off").unwrap();
    assert!(scope.read("vector.chunks").unwrap().is_none());
    let (_, hits) = final_chunks(&scope).unwrap().unwrap();
    assert_eq!(titles(&f, &hits)[0], "Zebra migration");
    std::fs::remove_file(&vec_file).unwrap();
    std::fs::remove_file(f.agents.join("reranker.md")).unwrap();
    o.loader.reload();
    assert!(o.loader.errors().is_empty());
    o.run("gone", "river herds", "default", RETRIEVAL_ROLES, None)
        .unwrap();
    let (key, _) = final_chunks(&o.mind.run("gone").unwrap()).unwrap().unwrap();
    assert_eq!(key, "fusion.chunks");
}

#[test]
fn bad_agent_files_get_clear_errors_with_file_and_line() {
    let r = Registry::discover().unwrap();
    let p = Path::new("agents/x.md");
    let e = |text: &str| parse(p, text, &r).unwrap_err().to_string();
    assert!(e("no front matter").contains("x.md:1"));
    assert!(e("---\nname: a\nrole: retrieve\n").contains("not closed"));
    let bad_yaml = e("---\nname: a\nrole: retrieve\ntools: [keyword_search\n---\n");
    assert!(
        bad_yaml.contains("x.md:") && bad_yaml.contains("bad front matter"),
        "{bad_yaml}"
    );
    let role = e("---\nname: a\nrole: dance\ntools: [keyword_search]\n---\n");
    assert!(
        role.contains("x.md:3") && role.contains("unknown role \"dance\""),
        "{role}"
    );
    let tool = e("---\nname: a\nrole: retrieve\ntools:\n  - keyword_search\n  - telepathy\n---\n");
    assert!(
        tool.contains("x.md:6") && tool.contains("unknown tool \"telepathy\""),
        "{tool}"
    );
    let wrong = e("---\nname: a\nrole: fuse\ntools: [keyword_search]\n---\n");
    assert!(wrong.contains("cannot fill the role"), "{wrong}");
    assert!(e("---\nrole: retrieve\ntools: [keyword_search]\n---\n").contains("name"));
    assert!(e("---\nname: A B\nrole: retrieve\ntools: [keyword_search]\n---\n").contains("x.md:2"));
    let extra = e("---\nname: a\nrole: retrieve\ntools: [keyword_search]\ncolour: red\n---\n");
    assert!(extra.contains("colour"), "{extra}");
    let params = e(
        "---\nname: a\nrole: retrieve\ntools: [keyword_search]\nparameters:\n  keyword_search:\n    k: 0\n---\n",
    );
    assert!(
        params.contains("x.md:6") && params.contains("at least 1"),
        "{params}"
    );
    // Duplicate names across two files: the second is rejected, naming the first.
    let dir = tempfile::tempdir().unwrap();
    let body = "---\nname: same\nrole: retrieve\ntools: [keyword_search]\n---\n";
    std::fs::write(dir.path().join("a.md"), body).unwrap();
    std::fs::write(dir.path().join("b.md"), body).unwrap();
    let l = AgentLoader::new(vec![dir.path().to_path_buf()], r);
    let errs = l.errors();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].to_string().contains("b.md") && errs[0].to_string().contains("a.md"));
    assert_eq!(l.agents().len(), 1);
}

#[test]
fn templates_fill_slots_and_refuse_missing_ones() {
    let r = Registry::discover().unwrap();
    let d = parse(
        Path::new("t.md"),
        "---\nname: t\nrole: retrieve\ntools: [keyword_search]\n---\nAnswer {{question}} from {{ evidence }}.\n",
        &r,
    )
    .unwrap();
    assert_eq!(d.slots(), ["question", "evidence"]);
    let mut v = std::collections::BTreeMap::new();
    v.insert("question".to_string(), "Q".to_string());
    assert!(d.render(&v).unwrap_err().contains("evidence"));
    v.insert("evidence".to_string(), "E".to_string());
    assert_eq!(d.render(&v).unwrap(), "Answer Q from E.\n");
}

/// The watcher picks up edits, additions and deletions by itself, and rejects a broken
/// edit keeping the previous version. How fast is a benchmark's business
/// (`nc-bench agents-reload`, target 500 ms); here the wait is generous so a loaded CI
/// machine cannot make it flaky.
#[test]
fn the_watcher_applies_changes_and_rejects_a_broken_edit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k.md");
    let v = |k: u32| {
        format!("---\nname: k\nrole: retrieve\ntools: [keyword_search]\nparameters:\n  keyword_search:\n    k: {k}\n---\n")
    };
    std::fs::write(&file, v(5)).unwrap();
    let loader = Arc::new(AgentLoader::new(
        vec![dir.path().to_path_buf()],
        Registry::discover().unwrap(),
    ));
    loader.watch(Duration::from_millis(100));
    let k_of = |l: &AgentLoader| l.agents()[0].def().parameters["keyword_search"]["k"].clone();
    assert_eq!(k_of(&loader), json!(5));
    let wait_for = |what: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !what() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "change not picked up"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    std::fs::write(&file, v(7)).unwrap();
    wait_for(&|| k_of(&loader) == json!(7));
    // A broken edit: rejected, the previous version stays active.
    std::fs::write(&file, "---\nname: k\nrole: retrieve\ntools: [nope]\n---\n").unwrap();
    wait_for(&|| !loader.errors().is_empty());
    assert_eq!(k_of(&loader), json!(7));
    assert!(loader.errors()[0]
        .to_string()
        .contains("unknown tool \"nope\""));
    // Fixed again: live, errors gone.
    std::fs::write(&file, v(9)).unwrap();
    wait_for(&|| k_of(&loader) == json!(9) && loader.errors().is_empty());
    // A new file and a deleted one.
    std::fs::write(
        dir.path().join("v.md"),
        "---\nname: v\nrole: retrieve\ntools: [vector_search]\n---\n",
    )
    .unwrap();
    wait_for(&|| loader.agents().len() == 2);
    std::fs::remove_file(&file).unwrap();
    wait_for(&|| loader.agents().len() == 1);
}
