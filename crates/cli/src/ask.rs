//! `neuralcore ask`: the control loop over a collection, printed as an answer with
//! numbered citations, as JSON (`--json`, schema `neuralcore.ask/v1`), or with the loop
//! traced (`--trace`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use neuralcore_agents::{AgentLoader, AskOptions, AskReport, Orchestrator, Registry, Services};
use neuralcore_engine::{Config, Engine};
use neuralcore_mind::Mind;

/// The services the config asks for: the engine, and the LLM and web search when
/// configured.
pub fn services(engine: Arc<Engine>) -> Result<Services> {
    let cfg: &Config = engine.config();
    let llm = if cfg.llm.is_configured() {
        Some(Arc::new(
            neuralcore_llm::LlmClient::new(cfg.llm.clone()).context("[llm] in the config")?,
        ))
    } else {
        None
    };
    let web = if cfg.web.enabled() {
        Some(Arc::new(
            neuralcore_web::WebSearch::new(cfg.web.clone()).context("[web] in the config")?,
        ))
    } else {
        None
    };
    Ok(Services {
        llm,
        web,
        ..Services::new(engine)
    })
}

/// An orchestrator over `engine` with the agents of `dirs` (missing folders: every role
/// is filled by the registered tools with their defaults).
pub fn orchestrator(engine: Arc<Engine>, mind: Mind, dirs: Vec<PathBuf>) -> Result<Orchestrator> {
    let registry = Registry::discover().map_err(|e| anyhow::anyhow!(e))?;
    let loader = Arc::new(AgentLoader::new(dirs, registry.clone()));
    for e in loader.errors() {
        eprintln!("warning: {e} (skipped)");
    }
    Ok(Orchestrator {
        registry,
        loader,
        mind,
        services: services(engine)?,
    })
}

/// A fresh run id.
pub fn new_run_id(prefix: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{t}-{}", std::process::id())
}

/// What `ask` was asked.
pub struct AskArgs {
    pub question: String,
    pub opts: AskOptions,
    pub trace: bool,
    pub run_id: Option<String>,
}

/// `ask`.
pub fn ask(json: bool, o: &Orchestrator, args: AskArgs) -> Result<ExitCode> {
    o.services.engine.collection(&args.opts.collection)?;
    let run_id = args.run_id.unwrap_or_else(|| new_run_id("ask"));
    let report = o.ask(&run_id, &args.question, &args.opts)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if args.trace {
            print_trace(&report);
        }
        print_answer(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_answer(r: &AskReport) {
    println!("{}", r.answer);
    if !r.citations.is_empty() {
        println!();
        for c in &r.citations {
            let mut src = c.source.clone().unwrap_or_default();
            if let Some(l) = &c.locator {
                src.push_str(&format!(" ({l})"));
            }
            println!(
                "[{}] {} — {} chars {}–{} (chunk {})",
                c.n,
                if c.title.is_empty() {
                    "untitled"
                } else {
                    &c.title
                },
                src,
                c.span.0,
                c.span.1,
                c.chunk
            );
            let quote: String = c.text.chars().take(300).collect();
            let more = if c.text.chars().count() > 300 {
                "…"
            } else {
                ""
            };
            println!("    \"{}{more}\"", quote.trim());
        }
    }
    let flagged = r.sentences.iter().filter(|s| !s.supported).count();
    if flagged > 0 {
        println!("\n({flagged} sentence(s) removed: not supported by the evidence they cite)");
    }
    if let Some(n) = r.note.as_ref().filter(|_| !r.abstained) {
        println!("\nnote: {n}");
    }
    println!(
        "\nconfidence {:.2} · {} · {} iteration(s) · {:.0} ms{}",
        r.confidence,
        r.method,
        r.budget.iterations,
        r.budget.elapsed_ms,
        if r.cost.tokens > 0 {
            format!(" · {} LLM tokens", r.cost.tokens)
        } else {
            String::new()
        }
    );
}

fn print_trace(r: &AskReport) {
    println!("── question: {}", r.question);
    for it in &r.iterations {
        println!("── iteration {} ({:.1} ms)", it.n, it.ms);
        if !it.observed.is_empty() {
            let o: Vec<String> = it
                .observed
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            println!("   observe   blackboard keys {}", o.join(" "));
        }
        if !it.queries.is_empty() {
            for q in &it.queries {
                println!("   query     {q}");
            }
        }
        for s in &it.stages {
            let msg: Vec<String> = s
                .results
                .iter()
                .map(|x| format!("{}: {}", x.tool, x.message))
                .collect();
            match &s.skipped {
                Some(why) => println!("   {:<9} skipped: {why}", s.stage),
                None => println!("   {:<9} {:>7.1} ms  {}", s.stage, s.ms, msg.join(" | ")),
            }
        }
        if let Some(rf) = &it.reflection {
            for g in &rf.gaps {
                println!("   gap       {g}");
            }
        }
    }
    for s in &r.finish {
        let msg: Vec<String> = s
            .results
            .iter()
            .map(|x| format!("{}: {}", x.tool, x.message))
            .collect();
        println!("── {:<9} {:>7.1} ms  {}", s.stage, s.ms, msg.join(" | "));
    }
    println!("── verdicts");
    for g in &r.verdicts {
        println!(
            "   {:<9} {:.2}  {}#{}  {}",
            format!("{:?}", g.verdict).to_uppercase(),
            g.score,
            g.doc,
            g.ordinal,
            g.title.chars().take(60).collect::<String>()
        );
        println!("             {}", g.reason);
    }
    println!("── decisions");
    for d in &r.decisions {
        println!("   {d}");
    }
    for f in &r.failures {
        println!("   failure: {f}");
    }
    println!();
}
