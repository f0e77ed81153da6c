//! The one contract every capability implements, and the registry that finds tools at
//! run time.
//!
//! A tool is stateless: everything it needs comes through its [`ToolContext`] (the run's
//! Mind scope, its parameters, a deadline, a cancellation flag and the shared services),
//! everything it produces goes to the Mind under its own namespace, and it answers with
//! a uniform [`ToolResult`]. Tools register themselves in their own file with
//! [`register_tool!`]; [`Registry::discover`] collects them all at run time, so adding a
//! tool never means editing a list.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_engine::Engine;
use neuralcore_mind::{Entry, MindError, Scope};
use serde::Serialize;
use serde_json::Value;

/// How expensive a tool is to run; a budget skips the most expensive first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CostClass {
    /// Microseconds, no model (a lookup, a fusion).
    Free,
    /// Milliseconds on the CPU (BM25, an HNSW search).
    Cheap,
    /// A small model forward pass (an embedding, a cross-encoder over a few passages).
    Moderate,
    /// An LLM call or a network round trip.
    Expensive,
}

/// What a tool is, what it reads and writes, and what parameters it takes.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    /// Unique name (`keyword_search`).
    pub name: &'static str,
    /// The namespace it owns: every key it writes starts with `<namespace>.`.
    pub namespace: &'static str,
    /// One line for `neuralcore tools list`.
    pub description: &'static str,
    /// Roles it can fill (`retrieve`, `fuse`, `rerank`, ...).
    pub roles: &'static [&'static str],
    /// Key patterns it reads (`input.query`, `*.chunks`).
    pub reads: &'static [&'static str],
    /// Keys it writes, relative to its namespace (`chunks` means `<namespace>.chunks`).
    pub writes: &'static [&'static str],
    /// JSON schema of its parameters (the subset [`crate::schema`] checks).
    #[serde(serialize_with = "schema_of")]
    pub params: fn() -> Value,
    /// Cost class.
    pub cost: CostClass,
}

fn schema_of<S: serde::Serializer>(f: &fn() -> Value, s: S) -> Result<S::Ok, S::Error> {
    f().serialize(s)
}

impl ToolSpec {
    /// The full keys it writes.
    pub fn written_keys(&self) -> Vec<String> {
        self.writes
            .iter()
            .map(|w| format!("{}.{w}", self.namespace))
            .collect()
    }
}

/// A sink for streamed LLM text.
pub type OnDelta = Arc<dyn Fn(&str) + Send + Sync>;

/// Services shared by every tool of a process (the engine over the data dir, and the
/// optional LLM endpoint and web search).
#[derive(Clone)]
pub struct Services {
    /// The engine: store, indexes, models.
    pub engine: Arc<Engine>,
    /// The LLM, when `[llm] base_url` is set.
    pub llm: Option<Arc<neuralcore_llm::LlmClient>>,
    /// Web search, when `[web] searxng_url` is set.
    pub web: Option<Arc<neuralcore_web::WebSearch>>,
    /// Where an LLM answer's text goes as it streams (a live draft; the checked answer
    /// comes in the report). `None`: no streaming.
    pub on_delta: Option<OnDelta>,
    /// The trust-weighted memory the loop may recall from (and signal).
    pub memory: Option<Arc<neuralcore_memory::MemorySearcher>>,
    /// The clock budgets are measured by ([`SystemClock`]; a test's [`ManualClock`]).
    pub clock: Arc<dyn Clock>,
}

impl Services {
    /// The engine alone: no LLM, no web search.
    pub fn new(engine: Arc<Engine>) -> Self {
        Services {
            engine,
            llm: None,
            web: None,
            on_delta: None,
            memory: None,
            clock: Arc::new(SystemClock),
        }
    }
}

/// The clock a run's budget is measured by. The loop and its tools read the time for
/// budget decisions only through it, so a test can run them on a clock it controls and
/// their outcome does not depend on how fast the machine is.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to: by [`ManualClock::advance`], and by `tick` after
/// every reading when made [`ManualClock::ticking`]. Tests of budgets use it (a deadline
/// on it passes exactly when the test says), and tests of everything else use it
/// frozen, so that no deadline runs out on a slow machine.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed: std::sync::Mutex<Duration>,
    tick: Duration,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            start: Instant::now(),
            elapsed: Default::default(),
            tick: Duration::ZERO,
        }
    }
}

impl ManualClock {
    /// A clock standing at the time it was made.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock that moves `tick` forward after every reading: a deadline shorter than
    /// `tick`, set from a reading, has passed at every later check.
    pub fn ticking(tick: Duration) -> Self {
        ManualClock {
            tick,
            ..Self::default()
        }
    }

    /// Move it forward by `d`.
    pub fn advance(&self, d: Duration) {
        *self.elapsed.lock().unwrap_or_else(|e| e.into_inner()) += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        let mut e = self.elapsed.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.start + *e;
        *e += self.tick;
        now
    }
}

/// When a run must be done, by the clock its budget is measured on.
#[derive(Clone)]
pub struct Deadline {
    at: Instant,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Deadline {
    // Never reads the clock: a ticking test clock must not move because of a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deadline({:?})", self.at)
    }
}

impl Deadline {
    /// `budget` after `start` (a time read from `clock`).
    pub fn after(clock: Arc<dyn Clock>, start: Instant, budget: Duration) -> Self {
        Deadline {
            at: start + budget,
            clock,
        }
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(self.clock.now())
    }
}

/// A flag that asks running tools to stop.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Ask to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether stopping was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Everything a run of a tool may use.
pub struct ToolContext<'a> {
    /// The run's Mind scope (reads see the run, then the global scope).
    pub mind: &'a Scope,
    /// Parameters, already checked against the tool's schema.
    pub params: &'a Value,
    /// When the tool must be done.
    pub deadline: Option<&'a Deadline>,
    /// Cancellation.
    pub cancel: &'a Cancel,
    /// Shared services.
    pub services: &'a Services,
    /// The tool's own spec (its namespace guards writes).
    pub spec: &'a ToolSpec,
    /// Who is running it (an agent's name), recorded as the writer of its keys.
    pub caller: &'a str,
}

impl ToolContext<'_> {
    /// Write `<namespace>.<name>`; a tool can only write inside its namespace.
    pub fn write(&self, name: &str, value: Value) -> Result<Entry, ToolError> {
        let key = format!("{}.{name}", self.spec.namespace);
        if !self.spec.writes.contains(&name) {
            return Err(ToolError::Permanent(format!(
                "tool {} does not declare the key {key} it writes",
                self.spec.name
            )));
        }
        Ok(self.mind.write(
            &key,
            value,
            &format!("{}/{}", self.caller, self.spec.name),
            None,
        )?)
    }

    /// A parameter, or its default.
    pub fn param<T: serde::de::DeserializeOwned>(&self, name: &str, default: T) -> T {
        self.params
            .get(name)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or(default)
    }

    /// Time left before the deadline (`None` = no deadline).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline.map(Deadline::remaining)
    }

    /// An error when cancelled or out of time.
    pub fn check(&self) -> Result<(), ToolError> {
        if self.cancel.is_cancelled() {
            return Err(ToolError::Transient("cancelled".into()));
        }
        if self.remaining() == Some(Duration::ZERO) {
            return Err(ToolError::Transient("deadline passed".into()));
        }
        Ok(())
    }
}

/// Why a tool failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Worth retrying (a timeout, a backend briefly down).
    #[error("{0}")]
    Transient(String),
    /// Will fail again (bad input, a missing model).
    #[error("{0}")]
    Permanent(String),
}

impl From<MindError> for ToolError {
    fn from(e: MindError) -> Self {
        match e {
            MindError::Unavailable(_) => ToolError::Transient(e.to_string()),
            _ => ToolError::Permanent(e.to_string()),
        }
    }
}

impl From<neuralcore_core::StoreError> for ToolError {
    fn from(e: neuralcore_core::StoreError) -> Self {
        ToolError::Transient(format!("store: {e}"))
    }
}

impl From<neuralcore_engine::EngineError> for ToolError {
    fn from(e: neuralcore_engine::EngineError) -> Self {
        ToolError::Permanent(e.to_string())
    }
}

/// How a run went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolStatus {
    /// Done.
    Ok,
    /// Nothing to do (no input, capability not available); not an error.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Failed.
    Failed {
        /// Worth retrying.
        transient: bool,
    },
}

/// What a run cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ToolMetrics {
    /// Wall time.
    pub latency_ms: f64,
    /// LLM tokens used.
    pub tokens: u64,
    /// Money spent, in US dollars.
    pub cost_usd: f64,
}

/// The uniform answer of every tool.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ToolResult {
    /// Tool name.
    pub tool: String,
    /// Outcome.
    #[serde(flatten)]
    pub status: ToolStatus,
    /// Keys written.
    pub keys_written: Vec<String>,
    /// Costs.
    pub metrics: ToolMetrics,
    /// A human-readable line.
    pub message: String,
    /// Done, but with less than it should have had (a model that failed, so a
    /// fallback decided): why. The run counts it among its failures, so its answer is
    /// not cached. Absent when the tool ran in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

/// What a tool's body returns on success.
#[derive(Debug, Default)]
pub struct Output {
    /// Keys written (full keys).
    pub keys: Vec<String>,
    /// A summary line.
    pub message: String,
    /// Skipped instead of done, with this reason.
    pub skipped: Option<String>,
    /// LLM tokens used.
    pub tokens: u64,
    /// LLM cost in USD (when priced).
    pub cost_usd: f64,
    /// Done with a fallback, and why ([`ToolResult::degraded`]).
    pub degraded: Option<String>,
}

impl Output {
    /// Done, having written `keys`.
    pub fn wrote(keys: Vec<String>, message: impl Into<String>) -> Self {
        Output {
            keys,
            message: message.into(),
            ..Default::default()
        }
    }
    /// Nothing to do.
    pub fn skipped(reason: impl Into<String>) -> Self {
        Output {
            skipped: Some(reason.into()),
            ..Default::default()
        }
    }
}

/// A capability.
pub trait Tool: Send + Sync {
    /// What it is.
    fn spec(&self) -> &ToolSpec;
    /// Do the work. Stateless: everything comes from `ctx`.
    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError>;
}

/// Run `tool` with `params` checked against its schema, timing it, and turn the outcome
/// into a [`ToolResult`].
pub fn run_tool(
    tool: &dyn Tool,
    mind: &Scope,
    params: &Value,
    deadline: Option<&Deadline>,
    cancel: &Cancel,
    services: &Services,
    caller: &str,
) -> ToolResult {
    let spec = tool.spec();
    let span = tracing::info_span!(
        "tool",
        otel.name = %format!("tool {}", spec.name),
        openinference.span.kind = "TOOL",
        tool.name = spec.name,
        neuralcore.tool.caller = caller,
        neuralcore.tool.status = tracing::field::Empty,
        neuralcore.tool.tokens = tracing::field::Empty,
        neuralcore.tool.cost_usd = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
    );
    let _entered = span.enter();
    let result = run_tool_inner(tool, mind, params, deadline, cancel, services, caller);
    span.record(
        "neuralcore.tool.status",
        match &result.status {
            ToolStatus::Ok => "ok",
            ToolStatus::Skipped { .. } => "skipped",
            ToolStatus::Failed { transient: true } => "failed (transient)",
            ToolStatus::Failed { transient: false } => "failed",
        },
    );
    span.record("neuralcore.tool.tokens", result.metrics.tokens);
    span.record("neuralcore.tool.cost_usd", result.metrics.cost_usd);
    if let ToolStatus::Failed { .. } = result.status {
        span.record("otel.status_code", "error");
        span.record("otel.status_message", result.message.as_str());
    }
    result
}

fn run_tool_inner(
    tool: &dyn Tool,
    mind: &Scope,
    params: &Value,
    deadline: Option<&Deadline>,
    cancel: &Cancel,
    services: &Services,
    caller: &str,
) -> ToolResult {
    let spec = tool.spec();
    let start = Instant::now();
    let outcome = crate::schema::validate(&(spec.params)(), params)
        .map_err(|e| ToolError::Permanent(format!("parameters of {}: {e}", spec.name)))
        .and_then(|()| {
            let ctx = ToolContext {
                mind,
                params,
                deadline,
                cancel,
                services,
                spec,
                caller,
            };
            ctx.check()?;
            tool.run(&ctx)
        });
    let latency_ms = start.elapsed().as_secs_f64() * 1e3;
    match outcome {
        Ok(out) => ToolResult {
            tool: spec.name.to_string(),
            status: match out.skipped {
                Some(reason) => ToolStatus::Skipped { reason },
                None => ToolStatus::Ok,
            },
            keys_written: out.keys,
            metrics: ToolMetrics {
                latency_ms,
                tokens: out.tokens,
                cost_usd: out.cost_usd,
            },
            message: out.message,
            degraded: out.degraded,
        },
        Err(e) => ToolResult {
            tool: spec.name.to_string(),
            status: ToolStatus::Failed {
                transient: matches!(e, ToolError::Transient(_)),
            },
            keys_written: Vec::new(),
            metrics: ToolMetrics {
                latency_ms,
                ..Default::default()
            },
            message: e.to_string(),
            degraded: None,
        },
    }
}

/// A tool's entry in the registry: how to make one.
pub struct Registration {
    /// Constructor.
    pub make: fn() -> Box<dyn Tool>,
}

inventory::collect!(Registration);

/// Register a tool type (with a `Default` constructor) from its own file.
#[macro_export]
macro_rules! register_tool {
    ($t:ty) => {
        $crate::inventory::submit! {
            $crate::tool::Registration { make: || Box::new(<$t>::default()) }
        }
    };
}

/// Every registered tool, by name.
#[derive(Clone)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl Registry {
    /// Collect every tool linked into the program. Two tools with one name, or two
    /// owning one namespace, are an error naming both.
    pub fn discover() -> Result<Registry, String> {
        let mut tools: BTreeMap<&'static str, Arc<dyn Tool>> = BTreeMap::new();
        let mut owners: BTreeMap<&'static str, &'static str> = BTreeMap::new();
        for r in inventory::iter::<Registration> {
            let t: Arc<dyn Tool> = Arc::from((r.make)());
            let s = t.spec();
            if tools.contains_key(s.name) {
                return Err(format!("two tools are named {:?}", s.name));
            }
            if let Some(other) = owners.insert(s.namespace, s.name) {
                return Err(format!(
                    "tools {other:?} and {:?} both claim the namespace {:?}",
                    s.name, s.namespace
                ));
            }
            tools.insert(s.name, t);
        }
        Ok(Registry { tools })
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Every tool, by name.
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values()
    }

    /// Tools that can fill `role`.
    pub fn for_role(&self, role: &str) -> Vec<Arc<dyn Tool>> {
        self.tools
            .values()
            .filter(|t| t.spec().roles.contains(&role))
            .cloned()
            .collect()
    }

    /// Tools that write a key matching `pattern` (`*.chunks`, `keyword.*`; without `*`,
    /// one exact key: the Mind's patterns, [`neuralcore_mind::glob_match`]).
    pub fn producing(&self, pattern: &str) -> Vec<Arc<dyn Tool>> {
        self.tools
            .values()
            .filter(|t| {
                t.spec()
                    .written_keys()
                    .iter()
                    .any(|k| neuralcore_mind::glob_match(pattern, k))
            })
            .cloned()
            .collect()
    }

    /// Every role some tool fills.
    pub fn roles(&self) -> Vec<&'static str> {
        let mut r: Vec<&'static str> = self
            .tools
            .values()
            .flat_map(|t| t.spec().roles.iter().copied())
            .collect();
        r.sort();
        r.dedup();
        r
    }
}
