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
    if trace {
        println!("── question: {}", args.question.trim());
    }
    let opts = AskOptions {
        events: sink(trace, args.stream),
        ..args.opts
    };
    let report = app.ask(
        &Tenant::default_tenant(),
        &run_id,
        &args.question,
        &opts,
        args.memory,
    )?;
    if args.stream && app.orchestrator().services.llm.is_some() {
        eprintln!();
    }
    print(json, trace, &report)?;
    Ok(ExitCode::SUCCESS)
}

/// Where the loop's events go: with `trace`, each printed as it happens (the events
/// the HTTP API streams); with `stream`, an LLM answer's draft on stderr.
pub fn sink(trace: bool, stream: bool) -> Option<EventSink> {
    (trace || stream).then(|| {
        Arc::new(move |e: &LoopEvent| {
            use std::io::Write;
            match e {
                LoopEvent::Delta { text } if stream => {
                    let mut err = std::io::stderr();
                    let _ = err.write_all(text.as_bytes());
                    let _ = err.flush();
                }
                // A closed stdout (`| head`) ends the printing, not the run.
                e if trace => {
                    if let Some(line) = e.render() {
                        let _ = writeln!(std::io::stdout(), "{line}");
                    }
                }
                _ => {}
            }
        }) as EventSink
    })
}

/// The report: as JSON, or the answer with its citations (after a blank line when the
/// trace came before it).
pub fn print(json: bool, trace: bool, report: &AskReport) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        if trace {
            println!();
        }
        print_answer(report);
    }
    Ok(())
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
