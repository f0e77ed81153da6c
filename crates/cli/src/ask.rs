//! `neuralcore ask`: the control loop over a collection, printed as an answer with
//! numbered citations, as JSON (`--json`, schema `neuralcore.ask/v1`), or with the loop
//! traced (`--trace`).

use std::process::ExitCode;

use anyhow::Result;
use std::sync::Arc;

use neuralcore_agents::{AskOptions, AskReport, EventSink, LoopEvent};
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
    let trace = args.trace && !json;
    let stream = args.stream;
    // `--trace` prints the loop's events as they happen (the events the HTTP API
    // streams); `--stream` shows an LLM answer's draft on stderr.
    let events: Option<EventSink> = (trace || stream).then(|| {
        Arc::new(move |e: &LoopEvent| {
            use std::io::Write;
            match e {
                LoopEvent::Delta { text } if stream => {
                    let mut err = std::io::stderr();
                    let _ = err.write_all(text.as_bytes());
                    let _ = err.flush();
                }
                e if trace => {
                    if let Some(line) = e.render() {
                        println!("{line}");
                    }
                }
                _ => {}
            }
        }) as EventSink
    });
    if trace {
        println!("── question: {}", args.question.trim());
    }
    let opts = AskOptions {
        events,
        ..args.opts
    };
    let report = app.ask(
        &Tenant::default_tenant(),
        &run_id,
        &args.question,
        &opts,
        args.memory,
    )?;
    if stream && app.orchestrator().services.llm.is_some() {
        eprintln!();
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if trace {
            println!();
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
