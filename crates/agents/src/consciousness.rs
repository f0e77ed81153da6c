//! Consciousness: the control loop that answers a question.
//!
//! ```text
//! OBSERVE → DECIDE → PLAN → RETRIEVE (every sub-query) → GRADE → VERIFY → REFINE → REFLECT
//!    ↑                                                                         │
//!    └──────────── insufficient, within budget: the gaps are the next focus ───┘
//!                                 sufficient, out of budget or nothing new: GENERATE → CHECK
//! ```
//!
//! Each stage is a role, run by whichever agents (markdown files) take it, or, when no
//! agent file takes a role, by every registered tool that fills it: the controller never
//! names a tool. All state lives on the run's Mind scope; the controller reads it by key
//! patterns (`*.decision`, `*.plan`, `*.verdicts`, `*.report`, `*.answer`) and writes
//! only `input.*` and `loop.*`. Retrieval for each sub-query runs the retrieval roles
//! (`retrieve`, `fuse`, `rerank`) in a child run scope of its own.
//!
//! Budgets: iterations, a deadline, LLM tokens and cost. When time runs short the
//! expensive stages go first (web verification and LLM calls are skipped, generation
//! falls back to extractive), then further iterations; the answer is always produced
//! from what is kept so far, or the engine abstains.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_core::parse_doc_id;
use neuralcore_engine::CacheServed;
use serde::{Deserialize, Serialize};
use serde_json::json;

use neuralcore_mind::Scope;

use crate::agent::AgentContext;
use crate::crag::{
    latest, Answer, AnswerSentence, Candidate, Decision, Evidence, Graded, Plan, Reflection, Strip,
    Switches, Verdict,
};
use crate::events::{EventSink, LoopEvent, RefinedStrip, RetrievedHit};
use crate::orchestrator::{final_chunks, Orchestrator, RETRIEVAL_ROLES};
use crate::tool::{Cancel, Clock, Deadline, ToolResult, ToolStatus};
use crate::AgentError;

/// Version of the `ask --json` output.
pub const SCHEMA: &str = "neuralcore.ask/v1";

/// Longest question accepted, in bytes.
pub const MAX_QUESTION_BYTES: usize = 16 * 1024;

/// How to answer.
#[derive(Clone, Default)]
pub struct AskOptions {
    /// The collection to search.
    pub collection: String,
    /// Ablations.
    pub switches: Switches,
    /// Overrides `loop.max_iterations`.
    pub max_iterations: Option<u32>,
    /// Overrides `loop.deadline_ms` (0 = none).
    pub deadline_ms: Option<u64>,
    /// A conversation to continue: its earlier turns are on the Mind's global scope
    /// (`sessions.<id>`), offered to the loop as `session.turns`, and this turn is added.
    pub session: Option<String>,
    /// The memory project to recall from (when the orchestrator has a memory store);
    /// empty: every project.
    pub project: Option<String>,
    /// The tenant asking: memories are recalled from this tenant's only (empty: the
    /// `default` tenant).
    pub tenant: String,
    /// The caller's cancellation: set, the loop stops at its next stage and the run
    /// ends in [`AgentError::Cancelled`] (a front end whose client went away).
    pub cancel: Cancel,
    /// Where the loop's events go as they happen (none: nowhere).
    pub events: Option<EventSink>,
}

impl std::fmt::Debug for AskOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AskOptions")
            .field("collection", &self.collection)
            .field("switches", &self.switches)
            .field("max_iterations", &self.max_iterations)
            .field("deadline_ms", &self.deadline_ms)
            .field("session", &self.session)
            .field("project", &self.project)
            .field("tenant", &self.tenant)
            .field("cancel", &self.cancel)
            .field("events", &self.events.as_ref().map(|_| "sink"))
            .finish()
    }
}

/// A trust signal the loop sent to a recalled memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemorySignal {
    /// Memory id.
    pub id: String,
    /// Its grade.
    pub verdict: crate::crag::Verdict,
    /// `used` (cited in the answer) or `ignored` (graded out, or not cited).
    pub signal: String,
    /// Its trust after the signal.
    pub trust: f64,
}

/// Most turns of a session kept whole (older ones are folded into its summary).
const SESSION_TURNS: usize = 20;

/// A conversation on the Mind (`sessions.<id>`): a summary of the older turns, and the
/// recent ones whole.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Session {
    /// What the folded turns asked and answered, oldest first: one paragraph written by
    /// the LLM (of the earlier summary and the turns it folded), or one line per turn
    /// folded by the rules (`asked "Q"; answered: …`), which follow an LLM paragraph
    /// when a later fold fell back to the rules.
    #[serde(default)]
    pub summary: Vec<String>,
    /// Recent turns: `{question, answer, abstained, method, run_id}`.
    #[serde(default)]
    pub turns: Vec<serde_json::Value>,
    /// Who wrote the summary at the last fold: `llm`, or `rules: <why not the LLM>`
    /// (empty before the first fold).
    #[serde(default)]
    pub summary_by: String,
}

/// What a summarizer is asked to fold (see [`Session::fold_with`]).
#[derive(Debug, Clone)]
pub struct Fold<'a> {
    /// The summary so far.
    pub summary: &'a [String],
    /// The turns leaving the window, oldest first: (question, answer).
    pub turns: Vec<(String, String)>,
    /// Most tokens the new summary may take ([`summary_budget`]).
    pub max_tokens: usize,
}

/// Tokens (as [`neuralcore_core::text::count_tokens`] counts them) an LLM-written
/// summary may take: a quarter of the session's budget, at least 32.
pub fn summary_budget(session_tokens: usize) -> usize {
    (session_tokens / 4).max(32)
}

fn field<'a>(t: &'a serde_json::Value, k: &str) -> &'a str {
    t.get(k).and_then(|v| v.as_str()).unwrap_or_default()
}

impl Session {
    /// Read a stored session: an object (a field of the wrong type reads as empty, so
    /// the others survive), or a bare list of turns from before summaries. Anything else
    /// is an empty session.
    pub fn from_value(v: serde_json::Value) -> Session {
        use serde_json::Value;
        let turns = |v: Option<Value>| match v {
            Some(Value::Array(t)) => t.into_iter().filter(Value::is_object).collect(),
            _ => Vec::new(),
        };
        match v {
            Value::Array(t) => Session {
                turns: turns(Some(Value::Array(t))),
                ..Default::default()
            },
            Value::Object(mut o) => Session {
                summary: match o.remove("summary") {
                    Some(Value::Array(lines)) => lines
                        .into_iter()
                        .filter_map(|l| l.as_str().map(str::to_string))
                        .collect(),
                    Some(Value::String(l)) if !l.trim().is_empty() => vec![l],
                    _ => Vec::new(),
                },
                turns: turns(o.remove("turns")),
                summary_by: o
                    .remove("summary_by")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            },
            _ => Session::default(),
        }
    }

    /// How many of the oldest turns to fold: while the turns take more than `budget`
    /// tokens (or there are more than the turn cap); the last two always stay whole.
    fn to_fold(&self, budget: usize) -> usize {
        let tokens = |t: &serde_json::Value| {
            ["question", "answer"]
                .iter()
                .map(|k| neuralcore_core::text::count_tokens(field(t, k)))
                .sum::<usize>()
        };
        let mut left: usize = self.turns.iter().map(tokens).sum();
        let mut n = 0;
        while self.turns.len() - n > 2 && (self.turns.len() - n > SESSION_TURNS || left > budget) {
            left -= tokens(&self.turns[n]);
            n += 1;
        }
        n
    }

    /// Fold the oldest turns into the summary by the rules (see [`Session::fold_with`]).
    pub fn fold(&mut self, budget: usize) -> usize {
        self.fold_with(budget, |_| Err("no LLM is configured".into()))
    }

    /// Fold the oldest turns into the summary while the turns take more than `budget`
    /// tokens (or there are more than the turn cap); the last two always stay whole.
    /// Returns how many turns were folded.
    ///
    /// `summarize` (called only when there is something to fold) writes the new summary
    /// from the old one and the folded turns; its text, cut to whole sentences within
    /// [`summary_budget`], replaces the summary. When it fails, or its text is empty or
    /// has no sentence end within the budget, the rules fold the turns instead: one line
    /// each, the question and the start of the answer, so no turn is lost. `summary_by`
    /// says which, and why not the LLM.
    pub fn fold_with(
        &mut self,
        budget: usize,
        summarize: impl FnOnce(&Fold<'_>) -> Result<String, String>,
    ) -> usize {
        let n = self.to_fold(budget);
        if n == 0 {
            return 0;
        }
        let folded: Vec<serde_json::Value> = self.turns.drain(..n).collect();
        let fold = Fold {
            summary: &self.summary,
            turns: folded
                .iter()
                .map(|t| (field(t, "question").into(), field(t, "answer").into()))
                .collect(),
            max_tokens: summary_budget(budget),
        };
        match summarize(&fold).and_then(|text| fit_summary(&text, fold.max_tokens)) {
            Ok(text) => {
                self.summary = vec![text];
                self.summary_by = "llm".into();
            }
            Err(why) => {
                for t in &folded {
                    let answer: String = field(t, "answer")
                        .split_whitespace()
                        .take(20)
                        .collect::<Vec<_>>()
                        .join(" ");
                    self.summary.push(format!(
                        "asked {:?}; answered: {answer}",
                        field(t, "question")
                    ));
                }
                self.summary_by = format!("rules: {why}");
                // The summary has a budget too: the oldest rule lines go first; an LLM
                // paragraph (any line not written by the rules) stays at the front.
                while self.summary.len() > 2 * SESSION_TURNS {
                    match self.summary.iter().position(|l| l.starts_with("asked \"")) {
                        Some(i) => {
                            self.summary.remove(i);
                        }
                        None => {
                            self.summary.remove(0);
                        }
                    }
                }
            }
        }
        n
    }
}

/// A written summary on one line, within `max` tokens: whole, or cut after its last
/// sentence that fits; an empty text, or one whose first sentence is already over, is
/// an `Err`.
fn fit_summary(text: &str, max: usize) -> Result<String, String> {
    use neuralcore_core::text::count_tokens;
    let text = crate::crag::collapse_ws(text);
    if text.is_empty() {
        return Err("the LLM's summary is empty".into());
    }
    let n = count_tokens(&text);
    if n <= max {
        return Ok(text);
    }
    let end =
        neuralcore_core::sentence::sentence_spans(&text, neuralcore_core::sentence::Lines::Wrap)
            .into_iter()
            .map(|(_, e)| e)
            .take_while(|e| count_tokens(&text[..*e]) <= max)
            .last()
            .unwrap_or(0);
    let kept = text[..end].trim();
    if kept.is_empty() || !kept.ends_with(['.', '!', '?', '"', ')']) {
        return Err(format!(
            "the LLM's summary is {n} tokens, over the budget of {max}, with no sentence end within it"
        ));
    }
    Ok(kept.to_string())
}

/// The Mind key of a session, or why the id cannot be one.
pub fn session_key(id: &str) -> Result<String, AgentError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
    if ok {
        Ok(format!("sessions.{id}"))
    } else {
        Err(AgentError::Invalid(format!(
            "session id {id:?}: use 1-64 characters of a-z, 0-9, _ and -"
        )))
    }
}

/// One stage of one iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StageTrace {
    /// The role.
    pub stage: String,
    /// Wall time.
    pub ms: f64,
    /// Why it did not run, if it did not.
    pub skipped: Option<String>,
    /// What each tool did.
    pub results: Vec<ToolResult>,
    /// What the stage got from the operation cache: hits by operation (`search`,
    /// `rerank`, `grade`, `llm`, `web`, `memory_search`, `query_embedding`); empty when
    /// nothing came from it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cache_hits: BTreeMap<String, u64>,
}

/// One iteration of the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IterationTrace {
    /// From 1.
    pub n: u32,
    /// What the blackboard held when it began (key count per namespace).
    pub observed: BTreeMap<String, usize>,
    /// The retrieve-or-not decision.
    pub decision: Option<Decision>,
    /// The plan.
    pub plan: Option<Plan>,
    /// Sub-queries retrieved for.
    pub queries: Vec<String>,
    /// Stages, in order.
    pub stages: Vec<StageTrace>,
    /// Reflection's findings.
    pub reflection: Option<Reflection>,
    /// Wall time.
    pub ms: f64,
}

/// A citation as `ask` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CitationOut {
    /// The number in the answer text.
    pub n: usize,
    /// What is cited: a chunk of a document, or a memory.
    pub evidence: Evidence,
    /// Document id (a memory's id, for a memory).
    pub doc: String,
    /// `<doc>#<ordinal>` (`memory:<id>`, for a memory).
    pub chunk: String,
    /// Chunk ordinal (0 for a memory).
    pub ordinal: u32,
    /// Document title.
    pub title: String,
    /// Character span `[start, end)` in the document's text.
    pub span: (u64, u64),
    /// The cited text.
    pub text: String,
    /// Where the document came from (path or URI).
    pub source: Option<String>,
    /// Position inside the source (`line 12`), if any.
    pub locator: Option<String>,
    /// The id the source gives the document, if any.
    pub external_id: Option<String>,
}

/// LLM use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cost {
    /// LLM tokens (prompt + completion).
    pub tokens: u64,
    /// USD, when the endpoint is priced.
    pub usd: f64,
}

/// Budgets and their use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BudgetUse {
    /// Iterations allowed.
    pub max_iterations: u32,
    /// Iterations run.
    pub iterations: u32,
    /// Deadline in ms (None = none).
    pub deadline_ms: Option<u64>,
    /// Time used.
    pub elapsed_ms: f64,
    /// Tokens allowed (None = no limit).
    pub max_tokens: Option<u64>,
    /// Cost allowed (None = no limit).
    pub max_cost_usd: Option<f64>,
    /// Why the loop stopped.
    pub stopped: String,
    /// Stages skipped to stay within budget.
    pub skipped: Vec<String>,
}

/// Everything `ask` reports (the `--json` schema, see `docs/ask-json.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AskReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// The question.
    pub question: String,
    /// The collection.
    pub collection: String,
    /// The run id (its Mind scope).
    pub run_id: String,
    /// The answer text with `[n]` markers (or the abstention).
    pub answer: String,
    /// The engine declined to answer for lack of evidence.
    pub abstained: bool,
    /// `extractive`, `llm`, `direct`, `model-only` or `abstain`.
    pub method: String,
    /// Confidence in [0, 1]: the grader's mean score of the cited chunks times the
    /// completeness of the evidence (0 when abstaining).
    pub confidence: f32,
    /// A note: why it abstained, or how it degraded.
    pub note: Option<String>,
    /// The answer's sentences with their citations and support scores.
    pub sentences: Vec<AnswerSentence>,
    /// The cited sources.
    pub citations: Vec<CitationOut>,
    /// Every graded chunk with its verdict, score and reason.
    pub verdicts: Vec<Graded>,
    /// The loop, iteration by iteration.
    pub iterations: Vec<IterationTrace>,
    /// Generation and the support check.
    pub finish: Vec<StageTrace>,
    /// The decisions taken, in order, one line each.
    pub decisions: Vec<String>,
    /// What is missing (reflection's gaps).
    pub missing: Vec<String>,
    /// Failures of tools (the run went on without them).
    pub failures: Vec<String>,
    /// LLM tokens and cost.
    pub cost: Cost,
    /// Budget use.
    pub budget: BudgetUse,
    /// Trust signals sent to recalled memories.
    pub memories: Vec<MemorySignal>,
    /// Evidence that disagrees on what the answer states (documents or memories), each
    /// stated in the answer too.
    #[serde(default)]
    pub conflicts: Vec<crate::crag::Conflict>,
    /// For a question about several things: which aspects the answer covers.
    #[serde(default)]
    pub aspects: Vec<crate::crag::AspectCoverage>,
    /// Set when this report was served from the answer cache (`[cache] answer`): the
    /// earlier run's report, still valid because nothing it drew on has changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<CachedAnswer>,
    /// The OpenTelemetry trace of this ask (32 hex digits), when `[telemetry]` exports
    /// spans: the same id a trace viewer (Phoenix, Langfuse, Jaeger) shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// Where a cached answer report came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CachedAnswer {
    /// The run that produced it.
    pub run_id: String,
    /// How long ago, in milliseconds.
    pub age_ms: u64,
    /// The cache tier that had it (`hot`, `redb`, `redis`, `postgres`...).
    pub tier: String,
    /// When it was served for another wording of its question (`[cache]
    /// answer_paraphrase`): the question it answered (`question` above is the one asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paraphrase_of: Option<String>,
    /// The cosine similarity of the two questions' embeddings, with `paraphrase_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
}

/// The ask's deadline in milliseconds (0: none): its own, else `[loop] deadline_ms`.
fn deadline_ms(o: &Orchestrator, opts: &AskOptions) -> u64 {
    opts.deadline_ms
        .unwrap_or(o.services.engine.config().control.deadline_ms)
}

impl Orchestrator {
    /// Answer `question` with the control loop in the run scope `run_id`. Each step is
    /// sent to `opts.events` as it happens (a failed run ends with
    /// [`LoopEvent::Error`]).
    pub fn ask(
        &self,
        run_id: &str,
        question: &str,
        opts: &AskOptions,
    ) -> Result<AskReport, AgentError> {
        // Per ask: with a sink, an LLM answer's draft goes to it too, as `delta` events;
        // with a deadline, no LLM request outlives three quarters of it, whatever the
        // client's timeouts and retries (a server that never answers leaves the last
        // quarter to answer extractively from the evidence).
        let deadline_ms = deadline_ms(self, opts);
        let limit_llm = deadline_ms > 0 && self.services.llm.is_some();
        let per_ask;
        let o = if opts.events.is_some() || limit_llm {
            let mut o = self.clone();
            if let Some(sink) = &opts.events {
                let before = o.services.on_delta.take();
                let sink = sink.clone();
                o.services.on_delta = Some(Arc::new(move |d: &str| {
                    if let Some(b) = &before {
                        b(d);
                    }
                    sink(&LoopEvent::Delta { text: d.into() });
                }));
            }
            if limit_llm {
                let until = Instant::now() + Duration::from_millis(deadline_ms * 3 / 4);
                o.services.llm = o.services.llm.map(|c| Arc::new(c.until(until)));
            }
            per_ask = o;
            &per_ask
        } else {
            self
        };
        let report = Run::start(o, run_id, question, opts).and_then(Run::answer);
        if let (Err(e), Some(sink)) = (&report, &opts.events) {
            sink(&LoopEvent::Error {
                message: e.to_string(),
            });
        }
        report
    }

    fn citations_out(&self, collection: &str, a: &Answer) -> Result<Vec<CitationOut>, AgentError> {
        let store = self.services.engine.store();
        let mut out = Vec::new();
        for c in &a.citations {
            let (doc, chunk, ordinal, source, locator, external_id) = match &c.evidence {
                Evidence::Chunk { doc, ordinal } => {
                    let prov = parse_doc_id(doc)
                        .map(|k| store.document(collection, k))
                        .transpose()
                        .map_err(|e| AgentError::Tool(e.to_string()))?
                        .flatten()
                        .and_then(|d| d.provenance.into_iter().next());
                    (
                        doc.clone(),
                        format!("{doc}#{ordinal}"),
                        *ordinal,
                        prov.as_ref().map(|p| p.uri.clone()),
                        prov.as_ref().and_then(|p| p.locator.clone()),
                        prov.and_then(|p| p.external_id),
                    )
                }
                Evidence::Memory { id } => (
                    id.clone(),
                    c.evidence.to_string(),
                    0,
                    Some(c.evidence.to_string()),
                    None,
                    None,
                ),
            };
            out.push(CitationOut {
                n: c.n,
                evidence: c.evidence.clone(),
                doc,
                chunk,
                ordinal,
                title: c.title.clone(),
                span: c.span,
                text: c.text.clone(),
                source,
                locator,
                external_id,
            });
        }
        Ok(out)
    }
}

/// Who writes the loop's own keys (`input.*`, `loop.*`).
const ME: &str = "consciousness";

/// One run of the loop: its budgets and everything it has found so far. Each phase is
/// a method that reads and extends it and reports what it did as [`LoopEvent`]s.
struct Run<'a> {
    o: &'a Orchestrator,
    opts: &'a AskOptions,
    run_id: &'a str,
    question: &'a str,
    start: Instant,
    scope: Scope,
    /// Budget decisions read the services' clock (a test's may stand still); the
    /// timings in the report are real.
    clock: Arc<dyn Clock>,
    deadline: Option<Deadline>,
    deadline_ms: u64,
    max_iterations: u32,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
    session_key: Option<String>,
    session: Session,
    switches: Switches,
    cost: Cost,
    failures: Vec<String>,
    decisions: Vec<String>,
    skipped: Vec<String>,
    iterations: Vec<IterationTrace>,
    /// Sub-queries retrieved for so far.
    tried: Vec<String>,
    /// This iteration's verdicts as grading left them (verification's changes are
    /// reported against them).
    graded: Vec<Graded>,
    stopped: String,
}

impl<'a> Run<'a> {
    /// Checks the question, sets the budgets and writes the run's input.
    fn start(
        o: &'a Orchestrator,
        run_id: &'a str,
        question: &'a str,
        opts: &'a AskOptions,
    ) -> Result<Self, AgentError> {
        let start = Instant::now();
        if question.trim().is_empty() {
            return Err(AgentError::Invalid("the question is empty".into()));
        }
        if question.len() > MAX_QUESTION_BYTES {
            return Err(AgentError::Invalid(format!(
                "the question is {} bytes; the longest accepted is {MAX_QUESTION_BYTES} \
                 (ask about a part of it, or ingest the text and ask about it)",
                question.len()
            )));
        }
        let question = question.trim();
        let cfg = o.services.engine.config().control.clone();
        let deadline_ms = deadline_ms(o, opts);
        let clock = o.services.clock.clone();
        let deadline = (deadline_ms > 0).then(|| {
            Deadline::after(
                clock.clone(),
                clock.now(),
                Duration::from_millis(deadline_ms),
            )
        });
        let session_key = opts.session.as_deref().map(session_key).transpose()?;
        let scope = o.mind.run(run_id)?;
        let mut session = Session::default();
        if let Some(k) = &session_key {
            session = o
                .mind
                .global()
                .read(k)?
                .map(|e| Session::from_value(e.value))
                .unwrap_or_default();
            scope.write("session.turns", json!(session.turns), ME, None)?;
            scope.write("session.summary", json!(session.summary), ME, None)?;
        }
        scope.write("input.query", json!(question), ME, None)?;
        scope.write("input.collection", json!(opts.collection), ME, None)?;
        if let Some(p) = &opts.project {
            scope.write("input.project", json!(p), ME, None)?;
        }
        let tenant = if opts.tenant.is_empty() {
            "default"
        } else {
            opts.tenant.as_str()
        };
        scope.write("input.tenant", json!(tenant), ME, None)?;
        scope.write("loop.switches", json!(opts.switches), ME, None)?;
        scope.write("loop.tried", json!([]), ME, None)?;
        Ok(Run {
            o,
            opts,
            run_id,
            question,
            start,
            scope,
            clock,
            deadline,
            deadline_ms,
            max_iterations: opts.max_iterations.unwrap_or(cfg.max_iterations).max(1),
            max_tokens: (cfg.max_tokens > 0).then_some(cfg.max_tokens),
            max_cost: (cfg.max_cost_usd > 0.0).then_some(cfg.max_cost_usd),
            session_key,
            session,
            switches: opts.switches,
            cost: Cost::default(),
            failures: Vec::new(),
            decisions: Vec::new(),
            skipped: Vec::new(),
            iterations: Vec::new(),
            tried: Vec::new(),
            graded: Vec::new(),
            stopped: String::from("max iterations reached"),
        })
    }

    fn emit(&self, event: LoopEvent) {
        if let Some(sink) = &self.opts.events {
            sink(&event);
        }
    }

    fn ctx(&self) -> AgentContext<'_> {
        AgentContext {
            mind: &self.scope,
            services: &self.o.services,
            deadline: self.deadline.clone(),
            cancel: &self.opts.cancel,
        }
    }

    fn remaining(&self) -> Option<Duration> {
        self.deadline.as_ref().map(Deadline::remaining)
    }

    /// Less than `frac` of the deadline is left.
    fn short_of_time(&self, frac: f64) -> bool {
        self.remaining()
            .is_some_and(|r| r.as_secs_f64() * 1e3 < frac * self.deadline_ms as f64)
    }

    fn llm_budget_spent(&self) -> bool {
        self.max_tokens.is_some_and(|m| self.cost.tokens >= m)
            || self.max_cost.is_some_and(|m| self.cost.usd >= m)
    }

    /// What is left of the LLM budget, for the stages that call it.
    fn write_budget(&self) -> Result<(), AgentError> {
        self.scope.write(
            "loop.budget",
            json!({
                "tokens": self.max_tokens.map(|m| m.saturating_sub(self.cost.tokens)),
                "cost_usd": self.max_cost.map(|m| (m - self.cost.usd).max(0.0)),
            }),
            ME,
            None,
        )?;
        Ok(())
    }

    /// Runs the agents or tools of `role` on the run's scope and reports the stage.
    fn stage(&mut self, iteration: Option<u32>, role: &str) -> StageTrace {
        let span = tracing::info_span!(
            "stage",
            otel.name = %format!("stage {role}"),
            openinference.span.kind = "CHAIN",
            neuralcore.stage = role,
            neuralcore.iteration = iteration,
            neuralcore.stage.tools = tracing::field::Empty,
            neuralcore.stage.failed = tracing::field::Empty,
        );
        let _entered = span.enter();
        let t = Instant::now();
        let served = CacheServed::now();
        let r = self.o.run_role(&self.ctx(), role);
        let trace = self.record(iteration, role, (t, served), r.results().cloned().collect());
        span.record("neuralcore.stage.tools", trace.results.len());
        span.record(
            "neuralcore.stage.failed",
            trace
                .results
                .iter()
                .filter(|r| matches!(r.status, ToolStatus::Failed { .. }))
                .count(),
        );
        trace
    }

    /// A stage's trace from its tools' results: their cost and failures counted, and
    /// reported.
    fn record(
        &mut self,
        iteration: Option<u32>,
        role: &str,
        (t, served): (Instant, CacheServed),
        results: Vec<ToolResult>,
    ) -> StageTrace {
        for res in &results {
            self.cost.tokens += res.metrics.tokens;
            self.cost.usd += res.metrics.cost_usd;
            self.note_failure(iteration, res);
        }
        let trace = StageTrace {
            stage: role.into(),
            ms: ms(t),
            skipped: results
                .is_empty()
                .then(|| "no agent or tool takes this role".to_string()),
            results,
            cache_hits: served.since(),
        };
        self.emit(LoopEvent::Stage {
            iteration,
            stage: trace.clone(),
        });
        trace
    }

    fn skip(&mut self, it: &mut IterationTrace, role: &str, why: &str) {
        let trace = StageTrace {
            stage: role.into(),
            ms: 0.0,
            skipped: Some(why.into()),
            results: Vec::new(),
            cache_hits: BTreeMap::new(),
        };
        self.emit(LoopEvent::Stage {
            iteration: Some(it.n),
            stage: trace.clone(),
        });
        it.stages.push(trace);
    }

    fn note_failure(&mut self, iteration: Option<u32>, r: &ToolResult) {
        if let Some(why) = &r.degraded {
            self.failures.push(format!("{}: degraded: {why}", r.tool));
        }
        if let ToolStatus::Failed { transient } = r.status {
            self.failures.push(format!(
                "{}: {}{}",
                r.tool,
                r.message,
                if transient { " (transient)" } else { "" }
            ));
            self.emit(LoopEvent::Failure {
                iteration,
                tool: r.tool.clone(),
                message: r.message.clone(),
                transient,
            });
        }
    }

    /// The loop, then the answer.
    fn answer(mut self) -> Result<AskReport, AgentError> {
        for n in 1..=self.max_iterations {
            if self.opts.cancel.is_cancelled() {
                return Err(AgentError::Cancelled);
            }
            if !self.iteration(n)? {
                break;
            }
        }
        self.decisions.push(format!("stop: {}", self.stopped));
        self.emit(LoopEvent::Stopped {
            reason: self.stopped.clone(),
        });
        if self.opts.cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }
        self.finish()
    }

    /// One iteration: whether to go on to the next.
    fn iteration(&mut self, n: u32) -> Result<bool, AgentError> {
        let span = tracing::info_span!(
            "iteration",
            otel.name = %format!("iteration {n}"),
            openinference.span.kind = "CHAIN",
            neuralcore.iteration = n,
            neuralcore.budget.tokens_spent = tracing::field::Empty,
            neuralcore.budget.cost_usd_spent = tracing::field::Empty,
            neuralcore.go_on = tracing::field::Empty,
        );
        let _entered = span.enter();
        let r = self
            .iteration_inner(n)
            .and_then(|go_on| self.intact().map(|()| go_on));
        span.record("neuralcore.budget.tokens_spent", self.cost.tokens);
        span.record("neuralcore.budget.cost_usd_spent", self.cost.usd);
        if let Ok(go_on) = &r {
            span.record("neuralcore.go_on", *go_on);
        }
        r
    }

    /// Whether the run's blackboard still holds its input. A Mind whose store restarted
    /// empty or evicted the run's keys mid-run (a Redis without persistence) makes the
    /// run fail clearly instead of going on from half a blackboard (an answer missing
    /// its evidence, or an abstention that blames the documents).
    fn intact(&self) -> Result<(), AgentError> {
        if self.scope.read("input.query")?.is_none() {
            return Err(neuralcore_mind::MindError::Unavailable(format!(
                "run {} lost its keys mid-run (the Mind's store restarted or evicted them); \
                 nothing of it was kept: ask again",
                self.run_id
            ))
            .into());
        }
        Ok(())
    }

    fn iteration_inner(&mut self, n: u32) -> Result<bool, AgentError> {
        let it_start = Instant::now();
        let it_clock = self.clock.now();
        let mut it = self.observe(n)?;
        let reflection = self.phases(&mut it)?;
        it.ms = ms(it_start);
        // What an iteration took by the budget's clock.
        let it_budget = self.clock.now().saturating_duration_since(it_clock);
        self.iterations.push(it);
        match reflection {
            Some(r) => Ok(self.go_on(n, &r, it_budget)),
            None => Ok(false),
        }
    }

    /// OBSERVE: what the blackboard holds, by key, whoever wrote it.
    fn observe(&mut self, n: u32) -> Result<IterationTrace, AgentError> {
        self.scope.write("loop.iteration", json!(n), ME, None)?;
        self.write_budget()?;
        let mut observed: BTreeMap<String, usize> = BTreeMap::new();
        for k in self.scope.list_keys("*")? {
            let ns = k.split_once('.').map(|x| x.0).unwrap_or(&k).to_string();
            *observed.entry(ns).or_default() += 1;
        }
        self.emit(LoopEvent::Observe {
            iteration: n,
            observed: observed.clone(),
        });
        Ok(IterationTrace {
            n,
            observed,
            decision: None,
            plan: None,
            queries: Vec::new(),
            stages: Vec::new(),
            reflection: None,
            ms: 0.0,
        })
    }

    /// DECIDE … REFLECT: reflection's findings, or none when the loop stops here
    /// (`stopped` says why).
    fn phases(&mut self, it: &mut IterationTrace) -> Result<Option<Reflection>, AgentError> {
        if !self.decide(it)? {
            return Ok(None);
        }
        let Some(queries) = self.plan(it)? else {
            return Ok(None);
        };
        self.retrieve(it, queries)?;
        self.grade(it)?;
        self.verify(it)?;
        self.refine(it)?;
        self.reflect(it)
    }

    /// DECIDE: whether to retrieve at all.
    fn decide(&mut self, it: &mut IterationTrace) -> Result<bool, AgentError> {
        let n = it.n;
        it.stages.push(self.stage(Some(n), "decide"));
        let decision = latest::<Decision>(&self.scope, "decision")?
            .filter(|d| d.iteration == n)
            .map(|d| d.data);
        it.decision = decision.clone();
        if let Some(d) = &decision {
            self.decisions
                .push(format!("iteration {n}: {}: {}", d.kind, d.reason));
            self.emit(LoopEvent::Decision {
                iteration: n,
                decision: d.clone(),
            });
        }
        let retrieve = decision.as_ref().is_none_or(|d| d.retrieve);
        if !retrieve {
            self.stopped = format!(
                "no retrieval: {}",
                decision.map(|d| d.reason).unwrap_or_default()
            );
        }
        Ok(retrieve)
    }

    /// PLAN: the sub-queries not tried yet (none: the loop stops).
    fn plan(&mut self, it: &mut IterationTrace) -> Result<Option<Vec<String>>, AgentError> {
        let n = it.n;
        it.stages.push(self.stage(Some(n), "plan"));
        let plan = latest::<Plan>(&self.scope, "plan")?
            .filter(|p| p.iteration == n)
            .map(|p| p.data);
        let mut queries: Vec<String> = match &plan {
            Some(p) => p.queries.clone(),
            None if n == 1 => vec![self.question.to_string()],
            None => Vec::new(),
        };
        queries.retain(|q| !q.trim().is_empty() && !self.tried.contains(q));
        if let Some(p) = &plan {
            self.emit(LoopEvent::Plan {
                iteration: n,
                plan: p.clone(),
            });
        }
        it.plan = plan;
        if queries.is_empty() {
            self.stopped = "nothing new to look for".into();
            return Ok(None);
        }
        if let Some(p) = &it.plan {
            self.decisions.push(format!(
                "iteration {n}: plan: {} ({}), {} queries: {}",
                p.task,
                p.complexity,
                queries.len(),
                p.reason
            ));
        }
        Ok(Some(queries))
    }

    /// RETRIEVE, each sub-query in a child scope of its own; the candidates go to
    /// grading as `loop.candidates`.
    fn retrieve(
        &mut self,
        it: &mut IterationTrace,
        queries: Vec<String>,
    ) -> Result<(), AgentError> {
        let n = it.n;
        let span = tracing::info_span!(
            "stage",
            otel.name = "stage retrieve",
            openinference.span.kind = "CHAIN",
            neuralcore.stage = "retrieve",
            neuralcore.iteration = n,
            neuralcore.stage.sub_queries = queries.len(),
            neuralcore.stage.candidates = tracing::field::Empty,
        );
        let _entered = span.enter();
        let t = Instant::now();
        let served = CacheServed::now();
        let mut results = Vec::new();
        let mut candidates: Vec<Candidate> = Vec::new();
        let top_k = self.o.services.engine.config().grade.top_k;
        for (j, q) in queries.iter().enumerate() {
            let _sub = tracing::info_span!(
                "sub_query",
                otel.name = %format!("sub-query {j}"),
                openinference.span.kind = "RETRIEVER",
                input.value = q.as_str(),
                neuralcore.sub_query = j,
            )
            .entered();
            self.emit(LoopEvent::SubQuery {
                iteration: n,
                index: j,
                query: q.clone(),
            });
            let child_id = format!("{}-i{n}q{j}", self.run_id);
            let child = self.o.mind.run(&child_id)?;
            child.write("input.query", json!(q), ME, None)?;
            child.write("input.collection", json!(self.opts.collection), ME, None)?;
            let cctx = AgentContext {
                mind: &child,
                services: &self.o.services,
                deadline: self.deadline.clone(),
                cancel: &self.opts.cancel,
            };
            let mut found = Vec::new();
            for role in RETRIEVAL_ROLES {
                let r = self.o.run_role(&cctx, role);
                found.extend(r.results().cloned());
            }
            for res in &found {
                self.note_failure(Some(n), res);
            }
            results.extend(found);
            let mut hits = Vec::new();
            if let Some((_, chunks)) = final_chunks(&child)? {
                for (rank, h) in chunks.into_iter().take(top_k).enumerate() {
                    let doc = neuralcore_core::doc_id(h.doc);
                    hits.push(RetrievedHit {
                        evidence: Evidence::chunk(doc.clone(), h.ordinal),
                        score: h.score,
                        rank,
                    });
                    candidates.push(Candidate {
                        doc,
                        ordinal: h.ordinal,
                        score: h.score,
                        rank,
                        query: q.clone(),
                        iteration: n,
                    });
                }
            }
            self.emit(LoopEvent::Retrieved {
                iteration: n,
                query: q.clone(),
                hits,
            });
            self.o.mind.drop_run(&child_id)?;
        }
        self.tried.extend(queries.iter().cloned());
        self.scope
            .write("loop.tried", json!(self.tried), ME, None)?;
        span.record("neuralcore.stage.candidates", candidates.len());
        self.scope
            .write("loop.candidates", json!(candidates), ME, None)?;
        let trace = StageTrace {
            stage: "retrieve".into(),
            ms: ms(t),
            skipped: None,
            results,
            cache_hits: served.since(),
        };
        self.emit(LoopEvent::Stage {
            iteration: Some(n),
            stage: trace.clone(),
        });
        it.stages.push(trace);
        it.queries = queries;
        Ok(())
    }

    /// This iteration's verdicts on the blackboard.
    fn verdicts_of(&self, n: u32) -> Result<Vec<Graded>, AgentError> {
        Ok(latest::<Vec<Graded>>(&self.scope, "verdicts")?
            .map(|r| r.data)
            .unwrap_or_default()
            .into_iter()
            .filter(|g| g.iteration == n)
            .collect())
    }

    /// GRADE every candidate; when half the deadline is gone, the expensive stages
    /// are switched off from here on.
    fn grade(&mut self, it: &mut IterationTrace) -> Result<(), AgentError> {
        let n = it.n;
        it.stages.push(self.stage(Some(n), "grade"));
        self.graded = self.verdicts_of(n)?;
        for g in &self.graded {
            self.emit(LoopEvent::Verdict {
                iteration: n,
                graded: g.clone(),
            });
        }
        if !self.switches.skip_expensive && self.short_of_time(0.5) {
            self.switches.skip_expensive = true;
            self.scope
                .write("loop.switches", json!(self.switches), ME, None)?;
            self.skipped.push(format!(
                "iteration {n}: web verification and LLM calls (deadline)"
            ));
            self.decisions.push(format!(
                "iteration {n}: budget: less than half the deadline left, expensive stages skipped"
            ));
        }
        Ok(())
    }

    /// VERIFY the AMBIGUOUS chunks against a second source.
    fn verify(&mut self, it: &mut IterationTrace) -> Result<(), AgentError> {
        let n = it.n;
        if self.switches.no_verify {
            self.skip(it, "verify", "switched off (--no-verify)");
            return Ok(());
        }
        it.stages.push(self.stage(Some(n), "verify"));
        let before = std::mem::take(&mut self.graded);
        for g in self.verdicts_of(n)? {
            let settled = matches!(g.verdict, Verdict::Verified | Verdict::Dropped);
            let was = before
                .iter()
                .find(|b| b.doc == g.doc && b.ordinal == g.ordinal && b.query == g.query);
            if settled && was.is_none_or(|b| b.verdict != g.verdict) {
                self.emit(LoopEvent::Verification {
                    iteration: n,
                    graded: g,
                });
            }
        }
        Ok(())
    }

    /// REFINE the kept chunks into strips.
    fn refine(&mut self, it: &mut IterationTrace) -> Result<(), AgentError> {
        let n = it.n;
        it.stages.push(self.stage(Some(n), "refine"));
        if let Some(strips) =
            latest::<Vec<Strip>>(&self.scope, "strips")?.filter(|s| s.iteration == n)
        {
            self.emit(LoopEvent::Refined {
                iteration: n,
                strips: strips
                    .data
                    .into_iter()
                    .map(|s| RefinedStrip {
                        evidence: s.evidence,
                        span: s.span,
                        text: s.text,
                        score: s.score,
                        verdict: s.verdict,
                    })
                    .collect(),
            });
        }
        Ok(())
    }

    /// REFLECT on completeness: the findings, or none when reflection is off or wrote
    /// nothing (the loop stops).
    fn reflect(&mut self, it: &mut IterationTrace) -> Result<Option<Reflection>, AgentError> {
        let n = it.n;
        if self.switches.no_reflect {
            self.skip(it, "reflect", "switched off (--no-reflect)");
            self.stopped = "reflection off: one iteration".into();
            return Ok(None);
        }
        it.stages.push(self.stage(Some(n), "reflect"));
        let r = latest::<Reflection>(&self.scope, "report")?
            .filter(|r| r.iteration == n)
            .map(|r| r.data);
        it.reflection = r.clone();
        match &r {
            Some(r) => {
                self.decisions
                    .push(format!("iteration {n}: reflect: {}", r.reason));
                self.emit(LoopEvent::Reflection {
                    iteration: n,
                    reflection: r.clone(),
                });
            }
            None => self.stopped = "no reflection".into(),
        }
        Ok(r)
    }

    /// After reflection: whether another iteration is wanted and fits the budgets
    /// (`stopped` says why not).
    fn go_on(&mut self, n: u32, r: &Reflection, it_budget: Duration) -> bool {
        let stop = if r.sufficient {
            "evidence sufficient".to_string()
        } else if r.next_queries.is_empty() {
            "insufficient, and nothing new to look for".into()
        } else if n == self.max_iterations {
            "max iterations reached".into()
        } else if self.remaining().is_some_and(|left| left < it_budget) {
            self.skipped.push(format!("iteration {}: deadline", n + 1));
            "deadline: no time for another iteration".into()
        } else if self.llm_budget_spent() {
            "LLM budget spent".into()
        } else {
            return true;
        };
        self.stopped = stop;
        false
    }

    /// GENERATE from the kept evidence (memories join it just before, when there is a
    /// store and the question went to retrieval), then CHECK claim support.
    fn generate(&mut self) -> Result<(Vec<StageTrace>, Answer), AgentError> {
        self.write_budget()?;
        if !self.switches.skip_expensive && self.short_of_time(0.2) {
            self.switches.skip_expensive = true;
            self.scope
                .write("loop.switches", json!(self.switches), ME, None)?;
            self.skipped.push("generation: LLM (deadline)".into());
        }
        let retrieved = self
            .iterations
            .first()
            .and_then(|i| i.decision.as_ref())
            .is_none_or(|d| d.retrieve);
        let roles: &[&str] = if self.o.services.memory.is_some() && retrieved {
            &["recall", "generate", "check"]
        } else {
            &["generate", "check"]
        };
        let finish = roles.iter().map(|role| self.stage(None, role)).collect();
        let answer: Answer = latest::<Answer>(&self.scope, "answer")?
            .map(|a| a.data)
            .unwrap_or_else(|| Answer {
                method: "abstain".into(),
                note: Some("no generator produced an answer".into()),
                ..Default::default()
            });
        if let Some(n) = &answer.note {
            self.decisions.push(format!("generate: {n}"));
        }
        Ok((finish, answer))
    }

    /// The memories recall brought (none without a memory store).
    fn recalled(&self) -> Result<Vec<crate::crag::Recalled>, AgentError> {
        Ok(self
            .scope
            .read_name("hits")?
            .into_iter()
            .filter_map(|e| serde_json::from_value(e.value).ok())
            .next()
            .unwrap_or_default())
    }

    /// Conflicts, stated in the answer: kept evidence that disagrees on what the answer
    /// states (found by generation, [`crate::conflict::strip_sides`]), and a cited memory
    /// that another recalled memory CONTRADICTS. Both are weighed by
    /// [`crate::conflict::weigh`] and stated by [`crate::conflict::sentence`]; neither
    /// side is dropped. An LLM answer that already says the sources disagree, naming
    /// every side, is not told again.
    fn state_conflicts(&mut self, answer: &mut Answer, recalled: &[crate::crag::Recalled]) {
        if answer.method == "abstain" {
            answer.conflicts.clear();
            return;
        }
        let cited: Vec<(usize, String)> = answer
            .citations
            .iter()
            .filter_map(|c| c.evidence.as_memory().map(|id| (c.n, id.to_string())))
            .collect();
        let mut stated: Vec<(String, String)> = Vec::new();
        for (n, id) in &cited {
            // Generation found this one already (the same statement, another value).
            if answer
                .conflicts
                .iter()
                .any(|c| c.sides.iter().any(|s| s.citations.contains(n)))
            {
                continue;
            }
            let Some(me_r) = recalled.iter().find(|r| &r.id == id) else {
                continue;
            };
            for f in &me_r.flags {
                let Some(other) = f
                    .strip_prefix("contradicts ")
                    .map(|o| o.split(' ').next().unwrap_or(""))
                else {
                    continue;
                };
                let pair = if id.as_str() < other {
                    (id.clone(), other.to_string())
                } else {
                    (other.to_string(), id.clone())
                };
                if stated.contains(&pair) {
                    continue;
                }
                let Some(o) = recalled.iter().find(|r| r.id == other) else {
                    continue;
                };
                stated.push(pair);
                let side = |r: &crate::crag::Recalled| crate::conflict::Side {
                    value: r.text.trim().to_string(),
                    citations: cited.iter().filter(|c| c.1 == r.id).map(|c| c.0).collect(),
                    sources: vec![format!("memory:{}", r.id)],
                    trust: Some(r.trust as f32),
                    date: None,
                };
                let c = crate::conflict::weigh("statement", vec![side(me_r), side(o)]);
                self.decisions.push(format!(
                    "memory: conflict stated between {} and {}",
                    me_r.id, o.id
                ));
                answer.conflicts.push(c);
            }
        }
        let said = answer.text().to_lowercase();
        for c in &answer.conflicts {
            let told = said.contains("disagree")
                && c.sides
                    .iter()
                    .all(|s| said.contains(&s.value.to_lowercase()));
            if !told {
                answer.sentences.push(crate::conflict::sentence(c));
            }
        }
        if !answer.conflicts.is_empty() {
            self.decisions.push(format!(
                "conflicts: {} stated ({})",
                answer.conflicts.len(),
                answer
                    .conflicts
                    .iter()
                    .map(|c| c.weighing.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }

    /// A question about several things: an aspect counts as covered only through a
    /// sentence the support check kept, and the answer says which aspects the evidence
    /// does not answer (a partial answer with a clear gap, not a blanket abstention).
    fn state_aspects(&mut self, answer: &mut Answer) {
        if answer.method == "abstain" || answer.aspects.is_empty() {
            return;
        }
        let supported: Vec<usize> = answer
            .sentences
            .iter()
            .filter(|s| s.supported)
            .flat_map(|s| s.citations.clone())
            .collect();
        let mut gaps = Vec::new();
        for a in &mut answer.aspects {
            a.citations.retain(|n| supported.contains(n));
            a.covered = !a.citations.is_empty();
            if !a.covered {
                gaps.push(a.aspect.clone());
            }
        }
        for g in &gaps {
            answer.sentences.push(AnswerSentence {
                text: format!("The evidence found does not answer \"{g}\"."),
                citations: vec![],
                support: None,
                supported: true,
            });
        }
        self.decisions.push(format!(
            "aspects: {} of {} covered{}",
            answer.aspects.len() - gaps.len(),
            answer.aspects.len(),
            if gaps.is_empty() {
                String::new()
            } else {
                format!("; not answered: {}", gaps.join(" | "))
            }
        ));
    }

    /// Trust signals about the question: a recalled memory cited by a supported sentence
    /// was used; one graded out, or kept but not cited, was ignored.
    fn signal_memories(
        &mut self,
        answer: &Answer,
        recalled: &[crate::crag::Recalled],
        now: u64,
    ) -> Vec<MemorySignal> {
        let mut memories = Vec::new();
        let Some(mem) = self.o.services.memory.clone() else {
            return memories;
        };
        let abstained = answer.method == "abstain";
        let cited: std::collections::HashSet<usize> = answer
            .sentences
            .iter()
            .filter(|s| s.supported)
            .flat_map(|s| s.citations.iter().copied())
            .collect();
        for r in recalled {
            let used = !abstained
                && answer
                    .citations
                    .iter()
                    .any(|c| c.evidence.as_memory() == Some(r.id.as_str()) && cited.contains(&c.n));
            let signal = if used {
                neuralcore_memory::Signal::Used
            } else {
                neuralcore_memory::Signal::Ignored
            };
            // About this question: `feedback export` makes a training pair of it.
            match mem
                .store()
                .signal_about(&r.id, signal, self.run_id, Some(self.question), now)
            {
                Ok(m) => memories.push(MemorySignal {
                    id: r.id.clone(),
                    verdict: r.verdict,
                    signal: signal.as_str().into(),
                    trust: m.trust,
                }),
                Err(e) => self
                    .failures
                    .push(format!("memory signal for {}: {e}", r.id)),
            }
        }
        if !memories.is_empty() {
            let used = memories.iter().filter(|m| m.signal == "used").count();
            self.decisions.push(format!(
                "memory: {used} recalled memories used, {} ignored",
                memories.len() - used
            ));
        }
        memories
    }

    /// Adds this turn to the conversation; past its budget the oldest turns are folded
    /// into the summary, by the LLM when there is one and the run's budgets allow (its
    /// tokens count in the run's cost), else by the rules.
    fn save_session(&mut self, answer: &Answer) -> Result<(), AgentError> {
        let Some(k) = self.session_key.clone() else {
            return Ok(());
        };
        let abstained = answer.method == "abstain";
        let mut session = std::mem::take(&mut self.session);
        session.turns.push(json!({
            "question": self.question,
            "answer": if abstained { answer.note.clone().unwrap_or_default() } else { answer.text() },
            "abstained": abstained,
            "method": answer.method,
            "run_id": self.run_id,
        }));
        let budget = self.o.services.engine.config().memory.session_tokens;
        let llm = self.o.services.llm.as_deref();
        let too_late = self.switches.skip_expensive || self.short_of_time(0.2);
        let (max_tokens, max_cost) = (self.max_tokens, self.max_cost);
        let mut cost = std::mem::take(&mut self.cost);
        let folded = session.fold_with(budget, |f| {
            let client = llm.ok_or("no LLM is configured")?;
            if too_late {
                return Err("the deadline is short, the LLM was skipped".into());
            }
            let need = crate::llm_judge::summary_need(f.summary, &f.turns, f.max_tokens);
            if let Some(left) = max_tokens.map(|m| m.saturating_sub(cost.tokens)) {
                if need > left {
                    return Err(format!(
                        "the LLM budget is spent (the summary needs about {need} tokens, {left} left)"
                    ));
                }
            }
            if max_cost.is_some_and(|m| cost.usd >= m) {
                return Err("the LLM cost budget is spent".into());
            }
            let (r, spent) = crate::llm_judge::summarize(client, f.summary, &f.turns, f.max_tokens);
            cost.tokens += spent.tokens;
            cost.usd += spent.usd;
            r
        });
        self.cost = cost;
        if folded > 0 {
            self.decisions.push(format!(
                "session: {folded} old turn(s) folded into the summary, by {}",
                session.summary_by
            ));
        }
        self.o.mind.global().write(&k, json!(session), ME, None)?;
        self.session = session;
        Ok(())
    }

    /// The configurable rule that writes long-term memories from a session: every
    /// answered question, as an episode of its project and session.
    fn remember(&mut self, answer: &Answer, now: u64) {
        let Some(mem) = &self.o.services.memory else {
            return;
        };
        let mcfg = &self.o.services.engine.config().memory;
        if !mcfg.remember_answers || !matches!(answer.method.as_str(), "extractive" | "llm") {
            return;
        }
        let new = neuralcore_memory::NewMemory {
            text: format!("Q: {} A: {}", self.question, answer.text()),
            kind: Some(neuralcore_memory::Kind::Episode),
            scope: neuralcore_memory::MemScope {
                project: self.opts.project.clone().unwrap_or_default(),
                session: self.opts.session.clone().unwrap_or_default(),
                ..Default::default()
            },
            source: format!("ask:{}", self.run_id),
            ..Default::default()
        };
        match mem.add(new, self.run_id, now) {
            Ok(m) => self
                .decisions
                .push(format!("memory: remembered this answer as {}", m.id)),
            Err(e) => self.failures.push(format!("remembering the answer: {e}")),
        }
    }

    /// GENERATE, CHECK, and the report.
    fn finish(mut self) -> Result<AskReport, AgentError> {
        let (finish, mut answer) = self.generate()?;
        self.intact()?;
        let recalled = self.recalled()?;
        let now = neuralcore_memory::now_ms();
        self.state_conflicts(&mut answer, &recalled);
        self.state_aspects(&mut answer);
        let verdicts: Vec<Graded> = latest::<Vec<Graded>>(&self.scope, "verdicts")?
            .map(|r| r.data)
            .unwrap_or_default();
        let last_reflection = self
            .iterations
            .iter()
            .rev()
            .find_map(|i| i.reflection.clone());
        let abstained = answer.method == "abstain";
        let citations = self.o.citations_out(&self.opts.collection, &answer)?;
        let memories = self.signal_memories(&answer, &recalled, now);
        self.save_session(&answer)?;
        if !abstained {
            self.remember(&answer, now);
        }
        let confidence = if abstained {
            0.0
        } else {
            confidence(&citations, &recalled, &verdicts, last_reflection.as_ref())
        };
        let missing = last_reflection.map(|r| r.gaps).unwrap_or_default();
        let text = if abstained {
            let why = answer
                .note
                .clone()
                .unwrap_or_else(|| "no kept evidence".into());
            let text = if why.starts_with("Insufficient evidence") {
                why
            } else {
                format!("Insufficient evidence: {why}.")
            };
            self.emit(LoopEvent::Abstention {
                reason: text.clone(),
                missing: missing.clone(),
            });
            text
        } else {
            let text = answer.text();
            self.emit(LoopEvent::Answer {
                answer: text.clone(),
                method: answer.method.clone(),
                confidence,
                citations: citations.clone(),
            });
            text
        };
        Ok(AskReport {
            schema: SCHEMA.into(),
            question: self.question.to_string(),
            collection: self.opts.collection.clone(),
            run_id: self.run_id.to_string(),
            answer: text,
            abstained,
            method: answer.method.clone(),
            confidence,
            note: answer.note.clone(),
            sentences: answer.sentences.clone(),
            citations,
            verdicts,
            budget: BudgetUse {
                max_iterations: self.max_iterations,
                iterations: self.iterations.len() as u32,
                deadline_ms: (self.deadline_ms > 0).then_some(self.deadline_ms),
                elapsed_ms: ms(self.start),
                max_tokens: self.max_tokens,
                max_cost_usd: self.max_cost,
                stopped: self.stopped,
                skipped: self.skipped,
            },
            iterations: self.iterations,
            finish,
            decisions: self.decisions,
            missing,
            failures: self.failures,
            cost: self.cost,
            memories,
            conflicts: answer.conflicts,
            aspects: answer.aspects,
            cached: None,
            trace_id: neuralcore_telemetry::trace_id(),
        })
    }
}

/// Confidence in an answer: the mean grade of what it cites, times the completeness
/// of the evidence (completeness is measured over documents: it scales only answers
/// that cite them).
fn confidence(
    citations: &[CitationOut],
    recalled: &[crate::crag::Recalled],
    verdicts: &[Graded],
    reflection: Option<&Reflection>,
) -> f32 {
    let scores: Vec<f32> = citations
        .iter()
        .filter_map(|c| match &c.evidence {
            Evidence::Memory { id } => recalled.iter().find(|r| &r.id == id).map(|r| r.score),
            Evidence::Chunk { doc, ordinal } => verdicts
                .iter()
                .find(|g| &g.doc == doc && g.ordinal == *ordinal)
                .map(|g| g.score),
        })
        .collect();
    let mean = if scores.is_empty() {
        1.0
    } else {
        scores.iter().sum::<f32>() / scores.len() as f32
    };
    let from_documents = citations
        .iter()
        .any(|c| matches!(c.evidence, Evidence::Chunk { .. }));
    let completeness = match reflection {
        Some(r) if from_documents => r.completeness,
        _ => 1.0,
    };
    (mean * completeness).clamp(0.0, 1.0)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
