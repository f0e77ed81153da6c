//! `neuralcore agents list|check|run`, `neuralcore tools list`, `neuralcore mind keys`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use neuralcore_agents::{
    final_chunks, AgentLoader, Orchestrator, Registry, Services, RETRIEVAL_ROLES,
};
use neuralcore_engine::{Config, Engine};
use neuralcore_mind::Mind;

/// The agent folders: those named on the command line, else the config's.
pub fn agent_dirs(config: &Config, dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    if dirs.is_empty() {
        config.agents.dirs.iter().map(PathBuf::from).collect()
    } else {
        dirs
    }
}

fn registry() -> Result<Registry> {
    Registry::discover().map_err(|e| anyhow::anyhow!(e))
}

/// `tools list`.
pub fn tools_list(json: bool) -> Result<ExitCode> {
    let r = registry()?;
    if json {
        let v: Vec<_> = r.all().map(|t| t.spec().clone()).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    for t in r.all() {
        let s = t.spec();
        println!(
            "{:<16} {:<10} roles: {:<10} cost: {:<9} reads: {}  writes: {}",
            s.name,
            s.namespace,
            s.roles.join(","),
            format!("{:?}", s.cost).to_lowercase(),
            s.reads.join(", "),
            s.written_keys().join(", ")
        );
        println!("{:<16} {}", "", s.description);
    }
    Ok(ExitCode::SUCCESS)
}

/// `agents list` and `agents check`: the role → agent → tools map, and every error.
pub fn agents_list(json: bool, dirs: &[PathBuf], check: bool) -> Result<ExitCode> {
    let loader = AgentLoader::new(dirs.to_vec(), registry()?);
    let defs = loader.definitions();
    let errors = loader.errors();
    if json {
        let v = serde_json::json!({
            "dirs": dirs,
            "agents": defs,
            "errors": errors.iter().map(|e| serde_json::json!({
                "path": e.path, "line": e.line, "message": e.message,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut roles: Vec<&str> = defs.iter().map(|d| d.role.as_str()).collect();
        roles.sort_by_key(|r| neuralcore_agents::ROLES.iter().position(|x| x == r));
        roles.dedup();
        for role in roles {
            println!("{role}");
            for d in defs.iter().filter(|d| d.role == role) {
                println!(
                    "  {}{} → {}   ({})",
                    d.name,
                    if d.enabled { "" } else { " [disabled]" },
                    d.tools.join(", "),
                    d.path.display()
                );
            }
        }
        if defs.is_empty() {
            println!(
                "no agents in {}",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for e in &errors {
            eprintln!("error: {e}");
        }
        if check && errors.is_empty() {
            println!("{} agent definitions, no errors", defs.len());
        }
    }
    Ok(if errors.is_empty() || !check {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What `agents run` was asked.
pub struct RunArgs {
    pub dirs: Vec<PathBuf>,
    pub query: String,
    pub collection: String,
    pub run_id: Option<String>,
    pub k: usize,
}

/// `agents run`: the retrieval roles over the blackboard, the final list printed.
pub fn agents_run(json: bool, engine: Engine, mind: Mind, args: RunArgs) -> Result<ExitCode> {
    let RunArgs {
        dirs,
        query,
        collection,
        run_id,
        k,
    } = args;
    let (query, collection) = (query.as_str(), collection.as_str());
    engine.collection(collection)?;
    let registry = registry()?;
    let loader = Arc::new(AgentLoader::new(dirs, registry.clone()));
    for e in loader.errors() {
        eprintln!("warning: {e} (skipped)");
    }
    let run_id = run_id.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        format!("run-{t}-{}", std::process::id())
    });
    let engine = Arc::new(engine);
    let o = Orchestrator {
        registry,
        loader,
        mind: mind.clone(),
        services: Services::new(engine.clone()),
    };
    // The Mind keeps the default tenant's runs under `default-<id>`.
    let mind_id = neuralcore_app::Tenant::default_tenant().run_id(&run_id);
    let mut report = o.run(&mind_id, query, collection, RETRIEVAL_ROLES, None)?;
    report.run_id = run_id.clone();
    let scope = mind.run(&mind_id)?;
    let (key, mut hits) = final_chunks(&scope)?.unwrap_or_default();
    hits.truncate(k);
    if json {
        let v = serde_json::json!({
            "run_id": run_id, "report": report, "final_key": key,
            "hits": hits.iter().map(|h| serde_json::json!({
                "id": format!("{}#{}", neuralcore_core::doc_id(h.doc), h.ordinal),
                "score": h.score,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("run {run_id}");
    for r in &report.roles {
        for a in &r.agents {
            println!(
                "  {:<9} {:<20} {}",
                r.role,
                a.agent,
                if a.ok { &a.message } else { "FAILED" }
            );
            if !a.ok {
                println!("            {}", a.message);
            }
        }
        for t in &r.tools {
            println!("  {:<9} {:<20} {}", r.role, t.tool, t.message);
        }
    }
    println!("top chunks from {key}:");
    for (i, h) in hits.iter().enumerate() {
        let title = engine
            .store()
            .document(collection, h.doc)?
            .map(|d| d.title)
            .unwrap_or_default();
        println!(
            "{:>3}. {:.3}  {}  [{}#{}]",
            i + 1,
            h.score,
            title,
            neuralcore_core::doc_id(h.doc),
            h.ordinal
        );
    }
    println!("inspect it with: neuralcore mind keys --run {run_id}");
    Ok(ExitCode::SUCCESS)
}

/// `mind keys --run ID`: the keys a run sees, with writer and version.
pub fn mind_keys(
    json: bool,
    mind: Mind,
    run_id: Option<&str>,
    pattern: &str,
    values: bool,
) -> Result<ExitCode> {
    let scope = match run_id {
        Some(r) => mind.run(&neuralcore_app::Tenant::default_tenant().run_id(r))?,
        None => mind.global(),
    };
    let entries = scope.read_pattern(pattern)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        println!(
            "no keys matching {pattern:?} in {}",
            run_id.map_or("the global scope".to_string(), |r| format!("run {r}"))
        );
    }
    for e in &entries {
        println!("{:<28} v{:<3} {}", e.key, e.version, e.writer);
        if values {
            let mut v = serde_json::to_string(&e.value)?;
            if v.chars().count() > 300 {
                v = v.chars().take(300).collect::<String>() + "…";
            }
            println!("    {v}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
