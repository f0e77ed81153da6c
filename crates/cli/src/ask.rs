//! `neuralcore ask`: the control loop over a collection, printed as an answer with
//! numbered citations, as JSON (`--json`, schema `neuralcore.ask/v1`), or with the loop
//! traced (`--trace`).

use std::process::ExitCode;

use anyhow::Result;
use neuralcore_agents::{AskOptions, AskReport};
use neuralcore_app::{new_run_id, App, Tenant};

/// What `ask` was asked.
pub struct AskArgs {
    pub question: String,
    pub opts: AskOptions,
    pub trace: bool,
    pub run_id: Option<String>,
    /// Recall from the memory store too.
    pub memory: bool,
    /// Show an LLM answer's draft on stderr as it streams.
    pub stream: bool,
}

/// `ask`.
pub fn ask(json: bool, app: &App, args: AskArgs) -> Result<ExitCode> {
    let run_id = args.run_id.unwrap_or_else(|| new_run_id("ask"));
    let on_delta: Option<neuralcore_agents::tool::OnDelta> = args.stream.then(|| {
        std::sync::Arc::new(|d: &str| {
            use std::io::Write;
            let mut e = std::io::stderr();
            let _ = e.write_all(d.as_bytes());
            let _ = e.flush();
        }) as neuralcore_agents::tool::OnDelta
    });
    let report = app.ask(
        &Tenant::default_tenant(),
        &run_id,
        &args.question,
        &args.opts,
        args.memory,
        on_delta,
    )?;
    if args.stream && app.orchestrator().services.llm.is_some() {
        eprintln!();
    }
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
