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
use std::time::{Duration, Instant};

use neuralcore_core::parse_doc_id;
use serde::Serialize;
use serde_json::json;

use crate::agent::AgentContext;
use crate::crag::{
    latest, Answer, AnswerSentence, Candidate, Decision, Graded, Plan, Reflection, Switches,
};
use crate::orchestrator::{final_chunks, Orchestrator, RoleReport, RETRIEVAL_ROLES};
use crate::tool::{Cancel, Deadline, ToolResult, ToolStatus};
use crate::AgentError;

/// Version of the `ask --json` output.
pub const SCHEMA: &str = "neuralcore.ask/v1";

/// Longest question accepted, in bytes.
pub const MAX_QUESTION_BYTES: usize = 16 * 1024;

/// How to answer.
#[derive(Debug, Clone, Default)]
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
}

/// A trust signal the loop sent to a recalled memory.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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
    let end = neuralcore_ingest::sentence_spans(&text, usize::MAX)
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
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StageTrace {
    /// The role.
    pub stage: String,
    /// Wall time.
    pub ms: f64,
    /// Why it did not run, if it did not.
    pub skipped: Option<String>,
    /// What each tool did.
    pub results: Vec<ToolResult>,
}

/// One iteration of the loop.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CitationOut {
    /// The number in the answer text.
    pub n: usize,
    /// Document id.
    pub doc: String,
    /// `<doc>#<ordinal>`.
    pub chunk: String,
    /// Chunk ordinal.
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
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct Cost {
    /// LLM tokens (prompt + completion).
    pub tokens: u64,
    /// USD, when the endpoint is priced.
    pub usd: f64,
}

/// Budgets and their use.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AskReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
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
}

impl Orchestrator {
    /// Answer `question` with the control loop in the run scope `run_id`.
    pub fn ask(
        &self,
        run_id: &str,
        question: &str,
        opts: &AskOptions,
    ) -> Result<AskReport, AgentError> {
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
        let cfg = self.services.engine.config().control.clone();
        let max_iterations = opts.max_iterations.unwrap_or(cfg.max_iterations).max(1);
        let deadline_ms = opts.deadline_ms.unwrap_or(cfg.deadline_ms);
        // Budget decisions read the services' clock (a test's may stand still); the
        // timings in the report are real.
        let clock = self.services.clock.clone();
        let deadline = (deadline_ms > 0).then(|| {
            Deadline::after(
                clock.clone(),
                clock.now(),
                Duration::from_millis(deadline_ms),
            )
        });
        let max_tokens = (cfg.max_tokens > 0).then_some(cfg.max_tokens);
        let max_cost = (cfg.max_cost_usd > 0.0).then_some(cfg.max_cost_usd);

        let session_key = opts.session.as_deref().map(session_key).transpose()?;
        let scope = self.mind.run(run_id)?;
        let me = "consciousness";
        let mut switches = opts.switches;
        let mut session = Session::default();
        if let Some(k) = &session_key {
            session = self
                .mind
                .global()
                .read(k)?
                .map(|e| Session::from_value(e.value))
                .unwrap_or_default();
            scope.write("session.turns", json!(session.turns), me, None)?;
            scope.write("session.summary", json!(session.summary), me, None)?;
        }
        scope.write("input.query", json!(question), me, None)?;
        scope.write("input.collection", json!(opts.collection), me, None)?;
        if let Some(p) = &opts.project {
            scope.write("input.project", json!(p), me, None)?;
        }
        let tenant = if opts.tenant.is_empty() {
            "default"
        } else {
            opts.tenant.as_str()
        };
        scope.write("input.tenant", json!(tenant), me, None)?;
        scope.write("loop.switches", json!(switches), me, None)?;
        scope.write("loop.tried", json!([]), me, None)?;
        let cancel = opts.cancel.clone();
        let ctx = AgentContext {
            mind: &scope,
            services: &self.services,
            deadline: deadline.clone(),
            cancel: &cancel,
        };
        let mut cost = Cost::default();
        let mut failures = Vec::new();
        let mut decisions = Vec::new();
        let mut skipped = Vec::new();
        let mut iterations = Vec::new();
        let mut tried: Vec<String> = Vec::new();
        let mut stopped = String::from("max iterations reached");
        // What is left of the LLM budget, for the stages that call it.
        let write_budget = |cost: &Cost| {
            scope.write(
                "loop.budget",
                json!({
                    "tokens": max_tokens.map(|m| m.saturating_sub(cost.tokens)),
                    "cost_usd": max_cost.map(|m| (m - cost.usd).max(0.0)),
                }),
                me,
                None,
            )
        };
        let remaining = || deadline.as_ref().map(Deadline::remaining);
        let short_of_time = |frac: f64| {
            remaining().is_some_and(|r| r.as_secs_f64() * 1e3 < frac * deadline_ms as f64)
        };

        for n in 1..=max_iterations {
            if cancel.is_cancelled() {
                return Err(AgentError::Cancelled);
            }
            let it_start = Instant::now();
            let it_clock = clock.now();
            scope.write("loop.iteration", json!(n), me, None)?;
            write_budget(&cost)?;
            // OBSERVE: what the blackboard holds, by key, whoever wrote it.
            let mut observed: BTreeMap<String, usize> = BTreeMap::new();
            for k in scope.list_keys("*")? {
                let ns = k.split_once('.').map(|x| x.0).unwrap_or(&k).to_string();
                *observed.entry(ns).or_default() += 1;
            }
            let mut it = IterationTrace {
                n,
                observed,
                decision: None,
                plan: None,
                queries: Vec::new(),
                stages: Vec::new(),
                reflection: None,
                ms: 0.0,
            };
            let stage = |it: &mut IterationTrace,
                         role: &str,
                         cost: &mut Cost,
                         failures: &mut Vec<String>| {
                let t = Instant::now();
                let r = self.run_role(&ctx, role);
                it.stages.push(trace(role, t, &r, cost, failures));
            };

            // DECIDE
            stage(&mut it, "decide", &mut cost, &mut failures);
            let decision = latest::<Decision>(&scope, "decision")?
                .filter(|d| d.iteration == n)
                .map(|d| d.data);
            it.decision = decision.clone();
            let retrieve = decision.as_ref().is_none_or(|d| d.retrieve);
            if let Some(d) = &decision {
                decisions.push(format!("iteration {n}: {}: {}", d.kind, d.reason));
            }
            if !retrieve {
                stopped = format!(
                    "no retrieval: {}",
                    decision.map(|d| d.reason).unwrap_or_default()
                );
                it.ms = ms(it_start);
                iterations.push(it);
                break;
            }

            // PLAN
            stage(&mut it, "plan", &mut cost, &mut failures);
            let plan = latest::<Plan>(&scope, "plan")?
                .filter(|p| p.iteration == n)
                .map(|p| p.data);
            let mut queries: Vec<String> = match &plan {
                Some(p) => p.queries.clone(),
                None if n == 1 => vec![question.to_string()],
                None => Vec::new(),
            };
            queries.retain(|q| !q.trim().is_empty() && !tried.contains(q));
            it.plan = plan;
            if queries.is_empty() {
                stopped = "nothing new to look for".into();
                it.ms = ms(it_start);
                iterations.push(it);
                break;
            }
            if let Some(p) = &it.plan {
                decisions.push(format!(
                    "iteration {n}: plan: {} ({}), {} queries: {}",
                    p.task,
                    p.complexity,
                    queries.len(),
                    p.reason
                ));
            }

            // RETRIEVE, each sub-query in a child scope of its own.
            let t = Instant::now();
            let mut results = Vec::new();
            let mut candidates: Vec<Candidate> = Vec::new();
            for (j, q) in queries.iter().enumerate() {
                let child_id = format!("{run_id}-i{n}q{j}");
                let child = self.mind.run(&child_id)?;
                child.write("input.query", json!(q), me, None)?;
                child.write("input.collection", json!(opts.collection), me, None)?;
                let cctx = AgentContext {
                    mind: &child,
                    services: &self.services,
                    deadline: deadline.clone(),
                    cancel: &cancel,
                };
                for role in RETRIEVAL_ROLES {
                    let r = self.run_role(&cctx, role);
                    for res in r.results() {
                        note_failure(res, &mut failures);
                        results.push(res.clone());
                    }
                }
                if let Some((_, hits)) = final_chunks(&child)? {
                    let top_k = self.services.engine.config().grade.top_k;
                    for (rank, h) in hits.into_iter().take(top_k).enumerate() {
                        candidates.push(Candidate {
                            doc: neuralcore_core::doc_id(h.doc),
                            ordinal: h.ordinal,
                            score: h.score,
                            rank,
                            query: q.clone(),
                            iteration: n,
                        });
                    }
                }
                self.mind.drop_run(&child_id)?;
            }
            tried.extend(queries.iter().cloned());
            scope.write("loop.tried", json!(tried), me, None)?;
            scope.write("loop.candidates", json!(candidates), me, None)?;
            it.stages.push(StageTrace {
                stage: "retrieve".into(),
                ms: ms(t),
                skipped: None,
                results,
            });
            it.queries = queries;

            // GRADE, VERIFY, REFINE
            stage(&mut it, "grade", &mut cost, &mut failures);
            if !switches.skip_expensive && short_of_time(0.5) {
                switches.skip_expensive = true;
                scope.write("loop.switches", json!(switches), me, None)?;
                skipped.push(format!(
                    "iteration {n}: web verification and LLM calls (deadline)"
                ));
                decisions.push(format!(
                    "iteration {n}: budget: less than half the deadline left, expensive stages skipped"
                ));
            }
            if switches.no_verify {
                it.stages
                    .push(skipped_stage("verify", "switched off (--no-verify)"));
            } else {
                stage(&mut it, "verify", &mut cost, &mut failures);
            }
            stage(&mut it, "refine", &mut cost, &mut failures);

            // REFLECT
            if switches.no_reflect {
                it.stages
                    .push(skipped_stage("reflect", "switched off (--no-reflect)"));
                stopped = "reflection off: one iteration".into();
                it.ms = ms(it_start);
                iterations.push(it);
                break;
            }
            stage(&mut it, "reflect", &mut cost, &mut failures);
            let r = latest::<Reflection>(&scope, "report")?
                .filter(|r| r.iteration == n)
                .map(|r| r.data);
            it.reflection = r.clone();
            it.ms = ms(it_start);
            // What an iteration took by the budget's clock.
            let it_budget = clock.now().saturating_duration_since(it_clock);
            iterations.push(it);
            let Some(r) = r else {
                stopped = "no reflection".into();
                break;
            };
            decisions.push(format!("iteration {n}: reflect: {}", r.reason));
            if r.sufficient {
                stopped = "evidence sufficient".into();
                break;
            }
            if r.next_queries.is_empty() {
                stopped = "insufficient, and nothing new to look for".into();
                break;
            }
            if n == max_iterations {
                stopped = "max iterations reached".into();
                break;
            }
            if remaining().is_some_and(|left| left < it_budget) {
                stopped = "deadline: no time for another iteration".into();
                skipped.push(format!("iteration {}: deadline", n + 1));
                break;
            }
            if max_tokens.is_some_and(|m| cost.tokens >= m)
                || max_cost.is_some_and(|m| cost.usd >= m)
            {
                stopped = "LLM budget spent".into();
                break;
            }
        }
        decisions.push(format!("stop: {stopped}"));
        if cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }

        // GENERATE, then CHECK claim support.
        write_budget(&cost)?;
        if !switches.skip_expensive && short_of_time(0.2) {
            switches.skip_expensive = true;
            scope.write("loop.switches", json!(switches), me, None)?;
            skipped.push("generation: LLM (deadline)".into());
        }
        let mut finish = Vec::new();
        // Memories join the evidence just before generation (when there is a store and
        // the question went to retrieval).
        let retrieved = iterations
            .first()
            .and_then(|i| i.decision.as_ref())
            .is_none_or(|d| d.retrieve);
        let finish_roles: &[&str] = if self.services.memory.is_some() && retrieved {
            &["recall", "generate", "check"]
        } else {
            &["generate", "check"]
        };
        for role in finish_roles {
            let t = Instant::now();
            let r = self.run_role(&ctx, role);
            finish.push(trace(role, t, &r, &mut cost, &mut failures));
        }
        let mut answer: Answer = latest::<Answer>(&scope, "answer")?
            .map(|a| a.data)
            .unwrap_or_else(|| Answer {
                method: "abstain".into(),
                note: Some("no generator produced an answer".into()),
                ..Default::default()
            });
        if let Some(n) = &answer.note {
            decisions.push(format!("generate: {n}"));
        }
        // The memories recall brought (none without a memory store).
        let recalled: Vec<crate::crag::Recalled> = scope
            .read_name("hits")?
            .into_iter()
            .filter_map(|e| serde_json::from_value(e.value).ok())
            .next()
            .unwrap_or_default();
        let now = neuralcore_memory::now_ms();
        // CONTRADICTS: an answer that cites a memory another recalled memory contradicts
        // says so, naming the lower-trust side; neither is dropped.
        if answer.method != "abstain" {
            let cited: Vec<(usize, String)> = answer
                .citations
                .iter()
                .filter_map(|c| c.doc.strip_prefix("mem:").map(|id| (c.n, id.to_string())))
                .collect();
            let mut stated: Vec<(String, String)> = Vec::new();
            for (n, id) in &cited {
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
                    let (hi, lo) = if me_r.trust >= o.trust {
                        (me_r, o)
                    } else {
                        (o, me_r)
                    };
                    answer.sentences.push(AnswerSentence {
                        text: format!(
                            "Note: the memories disagree: \"{}\" (trust {:.2}) contradicts \"{}\" (trust {:.2}, flagged as the lower-trust side).",
                            hi.text.trim(),
                            hi.trust,
                            lo.text.trim(),
                            lo.trust
                        ),
                        citations: vec![*n],
                        support: None,
                        supported: true,
                    });
                    decisions.push(format!(
                        "memory: conflict stated between {} and {}",
                        hi.id, lo.id
                    ));
                }
            }
        }
        let verdicts: Vec<Graded> = latest::<Vec<Graded>>(&scope, "verdicts")?
            .map(|r| r.data)
            .unwrap_or_default();
        let last_reflection = iterations.iter().rev().find_map(|i| i.reflection.clone());
        let abstained = answer.method == "abstain";
        let citations = self.citations_out(&opts.collection, &answer)?;
        // Trust signals: a recalled memory cited by a supported sentence was used; one
        // graded out, or kept but not cited, was ignored.
        let mut memories = Vec::new();
        if let Some(mem) = &self.services.memory {
            let cited: std::collections::HashSet<usize> = answer
                .sentences
                .iter()
                .filter(|s| s.supported)
                .flat_map(|s| s.citations.iter().copied())
                .collect();
            for r in &recalled {
                let node = format!("mem:{}", r.id);
                let used = !abstained
                    && answer
                        .citations
                        .iter()
                        .any(|c| c.doc == node && cited.contains(&c.n));
                let signal = if used {
                    neuralcore_memory::Signal::Used
                } else {
                    neuralcore_memory::Signal::Ignored
                };
                match mem.store().signal(&r.id, signal, run_id, now) {
                    Ok(m) => memories.push(MemorySignal {
                        id: r.id.clone(),
                        verdict: r.verdict,
                        signal: signal.as_str().into(),
                        trust: m.trust,
                    }),
                    Err(e) => failures.push(format!("memory signal for {}: {e}", r.id)),
                }
            }
            if !memories.is_empty() {
                let used = memories.iter().filter(|m| m.signal == "used").count();
                decisions.push(format!(
                    "memory: {used} recalled memories used, {} ignored",
                    memories.len() - used
                ));
            }
        }
        if let Some(k) = &session_key {
            session.turns.push(json!({
                "question": question,
                "answer": if abstained { answer.note.clone().unwrap_or_default() } else { answer.text() },
                "abstained": abstained,
                "method": answer.method,
                "run_id": run_id,
            }));
            // Short-term memory: past its budget the oldest turns are folded into the
            // summary, by the LLM when there is one and the run's budgets allow (its
            // tokens count in the run's cost), else by the rules.
            let budget = self.services.engine.config().memory.session_tokens;
            let llm = self.services.llm.as_deref();
            let folded = session.fold_with(budget, |f| {
                let client = llm.ok_or("no LLM is configured")?;
                if switches.skip_expensive || short_of_time(0.2) {
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
                let (r, spent) =
                    crate::llm_judge::summarize(client, f.summary, &f.turns, f.max_tokens);
                cost.tokens += spent.tokens;
                cost.usd += spent.usd;
                r
            });
            if folded > 0 {
                decisions.push(format!(
                    "session: {folded} old turn(s) folded into the summary, by {}",
                    session.summary_by
                ));
            }
            self.mind.global().write(k, json!(session), me, None)?;
        }
        // The configurable rule that writes long-term memories from a session: every
        // answered question, as an episode of its project and session.
        if let Some(mem) = &self.services.memory {
            let mcfg = &self.services.engine.config().memory;
            if mcfg.remember_answers
                && !abstained
                && matches!(answer.method.as_str(), "extractive" | "llm")
            {
                let text = format!("Q: {question} A: {}", answer.text());
                let new = neuralcore_memory::NewMemory {
                    text,
                    kind: Some(neuralcore_memory::Kind::Episode),
                    scope: neuralcore_memory::MemScope {
                        project: opts.project.clone().unwrap_or_default(),
                        session: opts.session.clone().unwrap_or_default(),
                        ..Default::default()
                    },
                    source: format!("ask:{run_id}"),
                    ..Default::default()
                };
                match mem.add(new, run_id, now) {
                    Ok(m) => decisions.push(format!("memory: remembered this answer as {}", m.id)),
                    Err(e) => failures.push(format!("remembering the answer: {e}")),
                }
            }
        }
        let confidence = if abstained {
            0.0
        } else {
            let scores: Vec<f32> = citations
                .iter()
                .filter_map(|c| match c.doc.strip_prefix("mem:") {
                    Some(id) => recalled.iter().find(|r| r.id == id).map(|r| r.score),
                    None => verdicts
                        .iter()
                        .find(|g| g.doc == c.doc && g.ordinal == c.ordinal)
                        .map(|g| g.score),
                })
                .collect();
            let mean = if scores.is_empty() {
                1.0
            } else {
                scores.iter().sum::<f32>() / scores.len() as f32
            };
            // Completeness is measured over documents: it scales only answers that cite them.
            let from_documents = citations.iter().any(|c| !c.doc.starts_with("mem:"));
            let completeness = match &last_reflection {
                Some(r) if from_documents => r.completeness,
                _ => 1.0,
            };
            (mean * completeness).clamp(0.0, 1.0)
        };
        let text = if abstained {
            let why = answer
                .note
                .clone()
                .unwrap_or_else(|| "no kept evidence".into());
            if why.starts_with("Insufficient evidence") {
                why
            } else {
                format!("Insufficient evidence: {why}.")
            }
        } else {
            answer.text()
        };
        Ok(AskReport {
            schema: SCHEMA,
            question: question.to_string(),
            collection: opts.collection.clone(),
            run_id: run_id.to_string(),
            answer: text,
            abstained,
            method: answer.method.clone(),
            confidence,
            note: answer.note.clone(),
            sentences: answer.sentences.clone(),
            citations,
            verdicts,
            budget: BudgetUse {
                max_iterations,
                iterations: iterations.len() as u32,
                deadline_ms: (deadline_ms > 0).then_some(deadline_ms),
                elapsed_ms: ms(start),
                max_tokens,
                max_cost_usd: max_cost,
                stopped,
                skipped,
            },
            iterations,
            finish,
            decisions,
            missing: last_reflection.map(|r| r.gaps).unwrap_or_default(),
            failures,
            cost,
            memories,
        })
    }

    fn citations_out(&self, collection: &str, a: &Answer) -> Result<Vec<CitationOut>, AgentError> {
        let store = self.services.engine.store();
        let mut out = Vec::new();
        for c in &a.citations {
            let prov = parse_doc_id(&c.doc)
                .map(|k| store.document(collection, k))
                .transpose()
                .map_err(|e| AgentError::Tool(e.to_string()))?
                .flatten()
                .and_then(|d| d.provenance.into_iter().next());
            let prov_source = c.doc.strip_prefix("mem:").map(|id| format!("memory:{id}"));
            out.push(CitationOut {
                n: c.n,
                doc: c.doc.clone(),
                chunk: format!("{}#{}", c.doc, c.ordinal),
                ordinal: c.ordinal,
                title: c.title.clone(),
                span: c.span,
                text: c.text.clone(),
                source: prov.as_ref().map(|p| p.uri.clone()).or(prov_source),
                locator: prov.as_ref().and_then(|p| p.locator.clone()),
                external_id: prov.and_then(|p| p.external_id),
            });
        }
        Ok(out)
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn skipped_stage(role: &str, why: &str) -> StageTrace {
    StageTrace {
        stage: role.into(),
        ms: 0.0,
        skipped: Some(why.into()),
        results: Vec::new(),
    }
}

fn note_failure(r: &ToolResult, failures: &mut Vec<String>) {
    if let ToolStatus::Failed { transient } = r.status {
        failures.push(format!(
            "{}: {}{}",
            r.tool,
            r.message,
            if transient { " (transient)" } else { "" }
        ));
    }
}

fn trace(
    role: &str,
    t: Instant,
    r: &RoleReport,
    cost: &mut Cost,
    failures: &mut Vec<String>,
) -> StageTrace {
    let results: Vec<ToolResult> = r.results().cloned().collect();
    for res in &results {
        cost.tokens += res.metrics.tokens;
        cost.usd += res.metrics.cost_usd;
        note_failure(res, failures);
    }
    StageTrace {
        stage: role.into(),
        ms: ms(t),
        skipped: results
            .is_empty()
            .then(|| "no agent or tool takes this role".to_string()),
        results,
    }
}
