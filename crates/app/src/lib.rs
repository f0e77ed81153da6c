//! The application core: what every front end (the CLI, the HTTP server, MCP, the web console)
//! calls. [`App::open`] turns a config and a data dir into the running parts — the
//! engine, the blackboard (Mind), the memory store, the LLM and web clients, the agents
//! and the control loop — and the front ends hand out the shapes defined here: the
//! search response ([`SearchResponse`]), the ask report
//! ([`neuralcore_agents::AskReport`]) and errors by category ([`AppError`]).
//!
//! Every call names its [`Tenant`]: collections and runs of one tenant are invisible to
//! another. The CLI is the `default` tenant.

mod answers;
pub mod backup;
pub use answers::{normalized as normalized_question, paraphrase_compatible};
mod documents;
mod error;
pub mod jobs;
pub mod keys;
pub mod marks;
mod memory;
mod op_cache;
mod pg_jobs;
mod runs;
mod search;
mod tenant;
mod urls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use documents::{ChunkInfo, DocumentInfo, SourceInfo, DOCUMENTS_SCHEMA};
pub use error::AppError;
pub use jobs::{Job, JobState, Jobs, TextDocument, Upload};
pub use keys::{KeyStore, Principal, Scope};
pub use marks::{AnswerMark, AnswerVerdict, MarkRequest, MarkStore, MarkedPassage, MARK_SCHEMA};
pub use memory::{
    memory_entities, GraphQuery, MemoryAdd, MemoryAdded, MemoryLinkReq, MemoryListQuery,
    MemorySearch, MemorySignalReq, MemoryWithRelations, TiersQuery,
};
use neuralcore_agents::{AgentLoader, Orchestrator, Registry, Services};
pub use neuralcore_agents::{AskOptions, AskReport, Cancel};
use neuralcore_core::CollectionInfo;
use neuralcore_engine::{Config, Engine, MemoryBackendKind, MindBackend};
use neuralcore_memory::{MemoryBackend, MemorySearcher, MemoryStore};
use neuralcore_mind::{Mind, MindConfig};
pub use runs::{RunSummary, RUNS_DEFAULT_LIMIT, RUNS_MAX_LIMIT, RUN_RETENTION, RUN_SCHEMA};
pub use search::{
    check_text_len, de_opt_uint, Hit, SearchRequest, SearchResponse, MAX_TEXT_CHARS, SEARCH_SCHEMA,
};
pub use tenant::{Tenant, DEFAULT_TENANT};
pub use urls::{UrlDocument, MAX_URL_BYTES};

/// How [`App::open`] builds the parts the config does not decide.
#[derive(Default)]
pub struct OpenOptions {
    /// Agent folders (empty: `agents.dirs` of the config).
    pub agent_dirs: Vec<PathBuf>,
    /// This blackboard instead of the configured one (an evaluation keeps its runs in
    /// memory).
    pub mind: Option<Mind>,
}

/// The running application over one data dir.
pub struct App {
    data_dir: PathBuf,
    orchestrator: Orchestrator,
    memory: OnceLock<Result<Arc<MemoryStore>, String>>,
    jobs: OnceLock<Result<Arc<Jobs>, String>>,
    marks: OnceLock<Result<Arc<MarkStore>, String>>,
    /// Held by every change of a collection's documents (ingest, a source's removal, a
    /// drop): a collection is never dropped under an ingest writing to its indexes.
    writes: std::sync::Mutex<()>,
    /// Fetches the pages of URL ingest, when `[web] ingest_urls` is on.
    pages: Option<neuralcore_web::PageFetcher>,
    /// Bounds the runs kept (`[mind] runs_kept`).
    retention: runs::Retention,
}

/// The outcome of an ask on its span: verdicts, budget use, how it answered.
fn record_ask(span: &tracing::Span, r: &AskReport) {
    use neuralcore_agents::crag::Verdict;
    let count = |v: Verdict| r.verdicts.iter().filter(|g| g.verdict == v).count();
    span.record("neuralcore.abstained", r.abstained);
    span.record("neuralcore.method", r.method.as_str());
    span.record("neuralcore.confidence", f64::from(r.confidence));
    span.record("neuralcore.iterations", r.budget.iterations);
    span.record(
        "neuralcore.stopped",
        format!("{:?}", r.budget.stopped).as_str(),
    );
    span.record("neuralcore.verdicts.correct", count(Verdict::Correct));
    span.record("neuralcore.verdicts.ambiguous", count(Verdict::Ambiguous));
    span.record("neuralcore.verdicts.incorrect", count(Verdict::Incorrect));
    span.record("neuralcore.verdicts.verified", count(Verdict::Verified));
    span.record("neuralcore.verdicts.dropped", count(Verdict::Dropped));
    span.record("neuralcore.citations", r.citations.len());
    span.record("neuralcore.answer_cached", r.cached.is_some());
    span.record("neuralcore.budget.tokens", r.cost.tokens);
    span.record("neuralcore.budget.cost_usd", r.cost.usd);
    span.record("otel.status_code", "ok");
}

impl App {
    /// Open the data dir with `config`: the engine (the store is locked for this
    /// process), the configured Mind, the LLM and web clients, the agents.
    pub fn open(data_dir: &Path, config: Config, opts: OpenOptions) -> Result<App, AppError> {
        config.validate()?;
        let engine = Engine::open(data_dir, config).map_err(|e| match e {
            neuralcore_engine::EngineError::Store(s)
                if s.is_transient() && !matches!(s, neuralcore_core::StoreError::Full(_)) =>
            {
                AppError::Unavailable(match running_server(data_dir) {
                    Some(srv) => format!(
                        "a neuralcore server (pid {}) owns the data dir {}: use its HTTP API at \
                         {} (docs/api.md), or stop it first",
                        srv.pid,
                        data_dir.display(),
                        srv.url
                    ),
                    None => format!("cannot open the data dir {}: {s}", data_dir.display()),
                })
            }
            other => AppError::from(other),
        })?;
        App::with_engine(data_dir, Arc::new(engine), opts)
    }

    /// An application over an engine the caller opened (with settings of its own).
    pub fn with_engine(
        data_dir: &Path,
        engine: Arc<Engine>,
        opts: OpenOptions,
    ) -> Result<App, AppError> {
        let config = engine.config();
        let mind = match opts.mind {
            Some(m) => m,
            None => open_mind(config, data_dir)?,
        };
        let dirs = if opts.agent_dirs.is_empty() {
            config.agents.dirs.iter().map(PathBuf::from).collect()
        } else {
            opts.agent_dirs
        };
        let registry = Registry::discover().map_err(AppError::Internal)?;
        let loader = Arc::new(AgentLoader::new(dirs, registry.clone()));
        for e in loader.errors() {
            tracing::warn!("{e} (skipped)");
        }
        let pages = urls::page_fetcher(&config.web)?;
        let retention = runs::Retention::new(config.mind.runs_kept);
        Ok(App {
            data_dir: data_dir.to_path_buf(),
            orchestrator: Orchestrator {
                registry,
                loader,
                mind,
                services: services(engine)?,
            },
            memory: OnceLock::new(),
            jobs: OnceLock::new(),
            marks: OnceLock::new(),
            writes: std::sync::Mutex::new(()),
            pages,
            retention,
        })
    }

    /// The data dir.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The engine: store, indexes, models.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.orchestrator.services.engine
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        self.engine().config()
    }

    /// The blackboard.
    pub fn mind(&self) -> &Mind {
        &self.orchestrator.mind
    }

    /// The orchestrator (agents, tools, the control loop) with the shared services.
    pub fn orchestrator(&self) -> &Orchestrator {
        &self.orchestrator
    }

    /// The memory store the config asks for, opened on first use (a PostgreSQL
    /// backend connects then).
    pub fn memory_store(&self) -> Result<Arc<MemoryStore>, AppError> {
        self.memory
            .get_or_init(|| {
                open_memory_backend(self.config(), &self.data_dir)
                    .and_then(|b| {
                        MemoryStore::new(b, self.config().memory.trust()).map_err(AppError::from)
                    })
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(AppError::Unavailable)
    }

    /// The ingest jobs of the data dir (`jobs.redb`), opened on first use; a server
    /// starts their worker ([`Jobs::start_worker`]).
    pub fn jobs(&self) -> Result<Arc<Jobs>, AppError> {
        self.jobs
            .get_or_init(|| {
                Jobs::open_with(&self.data_dir, self.config())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(AppError::Unavailable)
    }

    /// The tenant's collections, under the names it gave them.
    pub fn collections(&self, tenant: &Tenant) -> Result<Vec<CollectionInfo>, AppError> {
        Ok(self
            .engine()
            .collections()?
            .into_iter()
            .filter_map(|mut c| {
                let name = tenant.owns(&c.name)?.to_string();
                c.name = name;
                Some(c)
            })
            .collect())
    }

    /// One of the tenant's collections; another tenant's is not found.
    pub fn collection(&self, tenant: &Tenant, name: &str) -> Result<CollectionInfo, AppError> {
        let stored = require_collection(self.engine(), tenant, name)?;
        let mut c = self
            .engine()
            .collection(&stored)
            .map_err(|e| hide_gone(e, name))?;
        c.name = name.to_string();
        Ok(c)
    }

    /// Create an empty collection for the tenant (nothing happens when it exists).
    pub fn create_collection(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<CollectionInfo, AppError> {
        let mut c = self.engine().create_collection(&tenant.stored(name)?)?;
        c.name = name.to_string();
        Ok(c)
    }

    /// Delete one of the tenant's collections with everything in it.
    pub fn drop_collection(&self, tenant: &Tenant, name: &str) -> Result<(), AppError> {
        let _writing = self.writing();
        let stored = require_collection(self.engine(), tenant, name)?;
        self.engine()
            .drop_collection(&stored)
            .map_err(|e| hide_gone(e, name))?;
        // Its uploaded files go with it.
        let _ = std::fs::remove_dir_all(jobs::Jobs::sources_dir(&self.data_dir, &stored));
        Ok(())
    }

    /// Ingest files and folders into one of the tenant's collections (created when
    /// missing).
    pub fn ingest(
        &self,
        tenant: &Tenant,
        paths: &[PathBuf],
        collection: &str,
        obs: &mut dyn neuralcore_engine::IngestObserver,
    ) -> Result<neuralcore_engine::IngestSummary, AppError> {
        let stored = tenant.stored(collection)?;
        let _writing = self.writing();
        let mut summary = self.engine().ingest(paths, &stored, obs)?;
        summary.collection = collection.to_string();
        Ok(summary)
    }

    /// The lock every change of a collection's documents holds.
    pub(crate) fn writing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Search one of the tenant's collections.
    pub fn search(&self, tenant: &Tenant, req: &SearchRequest) -> Result<SearchResponse, AppError> {
        search(self.engine(), tenant, req)
    }

    /// Answer `question` over one of the tenant's collections with the control loop,
    /// in the run scope `run_id` (of this tenant). `recall` lets the loop draw on the
    /// memory store too. The loop's events go to `opts.events` as they happen, in the
    /// caller's names (the sources of uploads as `upload:<name>`). A finished run
    /// (answered or abstained) is kept for [`App::runs`] and [`App::run`]; failing to
    /// keep it is logged, never the ask's error.
    pub fn ask(
        &self,
        tenant: &Tenant,
        run_id: &str,
        question: &str,
        opts: &AskOptions,
        recall: bool,
    ) -> Result<AskReport, AppError> {
        use tracing::field::Empty;
        let span = tracing::info_span!(
            "ask",
            openinference.span.kind = "AGENT",
            neuralcore.tenant = tenant.as_str(),
            neuralcore.collection = opts.collection.as_str(),
            neuralcore.run_id = run_id,
            neuralcore.abstained = Empty,
            neuralcore.method = Empty,
            neuralcore.confidence = Empty,
            neuralcore.iterations = Empty,
            neuralcore.stopped = Empty,
            neuralcore.verdicts.correct = Empty,
            neuralcore.verdicts.ambiguous = Empty,
            neuralcore.verdicts.incorrect = Empty,
            neuralcore.verdicts.verified = Empty,
            neuralcore.verdicts.dropped = Empty,
            neuralcore.citations = Empty,
            neuralcore.answer_cached = Empty,
            neuralcore.budget.tokens = Empty,
            neuralcore.budget.cost_usd = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
        );
        let _entered = span.enter();
        let started_ms = neuralcore_memory::now_ms();
        let clock = std::time::Instant::now();
        let mut report = match self.ask_unrecorded(tenant, run_id, question, opts, recall) {
            Ok(r) => r,
            Err(e) => {
                span.record("otel.status_code", "error");
                span.record("otel.status_message", e.to_string().as_str());
                return Err(e);
            }
        };
        // This ask's trace, also for an answer served from the cache.
        report.trace_id = neuralcore_telemetry::trace_id();
        record_ask(&span, &report);
        let latency_ms = u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
        match runs::record(self.mind(), tenant, &report, started_ms, latency_ms) {
            Ok(()) => self.retention.recorded(self.mind(), tenant),
            Err(e) => tracing::warn!("the run {run_id:?} was not kept for the runs list: {e}"),
        }
        Ok(report)
    }

    /// Waits until the background pass that keeps runs within `[mind] runs_kept` (and
    /// purges expired blackboard entries) has finished, if one runs.
    pub fn settle_runs(&self) {
        self.retention.settle();
    }

    /// The tenant's recent runs (kept for [`RUN_RETENTION`], the newest `[mind]
    /// runs_kept`), newest first, at most
    /// `limit` (1 to [`RUNS_MAX_LIMIT`]).
    pub fn runs(&self, tenant: &Tenant, limit: usize) -> Result<Vec<RunSummary>, AppError> {
        runs::list(self.mind(), tenant, limit)
    }

    /// The report of one of the tenant's recent runs; another tenant's run is not
    /// found, as an unknown one.
    pub fn run(&self, tenant: &Tenant, run_id: &str) -> Result<AskReport, AppError> {
        runs::get(self.mind(), tenant, run_id)
    }

    fn ask_unrecorded(
        &self,
        tenant: &Tenant,
        run_id: &str,
        question: &str,
        opts: &AskOptions,
        recall: bool,
    ) -> Result<AskReport, AppError> {
        let stored = require_collection(self.engine(), tenant, &opts.collection)?;
        let cache_key = self.answer_key(tenant, &stored, question, opts, recall);
        if let Some(report) = cache_key.as_ref().and_then(|k| {
            self.cached_answer(&k.key, question, run_id)
                .or_else(|| self.paraphrased_answer(tenant, k, question, opts, run_id))
        }) {
            if let Some(sink) = &opts.events {
                replay_cached(sink, &report);
            }
            return Ok(report);
        }
        let mut o = self.orchestrator.clone();
        // The LLM's completions and web pages are cached in the tenant's partition.
        o.services.llm = o
            .services
            .llm
            .as_ref()
            .map(|c| Arc::new(c.scoped(tenant.as_str())));
        o.services.web = o
            .services
            .web
            .as_ref()
            .map(|w| Arc::new(w.scoped(tenant.as_str())));
        if recall {
            let store = self.memory_store()?;
            o.services.memory = Some(Arc::new(MemorySearcher::new(
                store,
                self.engine().embedder(),
            )));
        }
        // Sessions live on the Mind's global scope: each tenant's under its own ids.
        let session = opts.session.as_deref().map(|s| tenant.run_id(s));
        let names = Arc::new(jobs::PublicNames::new(&self.data_dir, &stored));
        // The events speak the caller's names too.
        let events = opts.events.clone().map(|sink| {
            let names = names.clone();
            Arc::new(move |e: &neuralcore_agents::LoopEvent| match e {
                neuralcore_agents::LoopEvent::Answer {
                    answer,
                    method,
                    confidence,
                    citations,
                } => {
                    let mut citations = citations.clone();
                    for c in &mut citations {
                        c.source = c.source.take().map(|s| names.of(&s));
                    }
                    sink(&neuralcore_agents::LoopEvent::Answer {
                        answer: answer.clone(),
                        method: method.clone(),
                        confidence: *confidence,
                        citations,
                    })
                }
                e => sink(e),
            }) as neuralcore_agents::EventSink
        });
        let opts = AskOptions {
            collection: stored,
            tenant: tenant.as_str().to_string(),
            session,
            events,
            ..opts.clone()
        };
        let mut report = match o.ask(&tenant.run_id(run_id), question, &opts) {
            Ok(r) => r,
            // A collection dropped while it was asked is not found, as it would have been
            // a moment later (its index went from under the loop's retrieval).
            Err(e) => {
                return Err(match AppError::from(e) {
                    AppError::Internal(m) => {
                        match self.engine().store().collection(&opts.collection) {
                            Ok(None) => AppError::NotFound(format!(
                                "collection {:?} was dropped while the question was asked",
                                opts_collection_name(tenant, &opts.collection)
                            )),
                            _ => AppError::Internal(m),
                        }
                    }
                    other => other,
                })
            }
        };
        // The report speaks the caller's names.
        for c in &mut report.citations {
            c.source = c.source.take().map(|s| names.of(&s));
        }
        report.collection = opts_collection_name(tenant, &report.collection);
        report.run_id = run_id.to_string();
        if let Some(k) = &cache_key {
            self.keep_answer(k, tenant, &report);
        }
        Ok(report)
    }
}

/// The events of a cached answer: why the loop did not run, then its outcome.
fn replay_cached(sink: &neuralcore_agents::EventSink, report: &AskReport) {
    use neuralcore_agents::LoopEvent;
    let age = report.cached.as_ref().map_or(0, |c| c.age_ms);
    sink(&LoopEvent::Stopped {
        reason: format!("served from the answer cache (an unchanged collection; {age} ms old)"),
    });
    if report.abstained {
        sink(&LoopEvent::Abstention {
            reason: report.answer.clone(),
            missing: report.missing.clone(),
        });
    } else {
        sink(&LoopEvent::Answer {
            answer: report.answer.clone(),
            method: report.method.clone(),
            confidence: report.confidence,
            citations: report.citations.clone(),
        });
    }
}

impl App {
    /// [`App::ask`] as the next turn of a conversation the caller holds (an OpenAI-style
    /// message list): the earlier turns, `(question, answer)` oldest first, are the
    /// session the loop reads for follow-ups, for this call only.
    #[allow(clippy::too_many_arguments)]
    pub fn ask_in_conversation(
        &self,
        tenant: &Tenant,
        run_id: &str,
        question: &str,
        history: &[(String, String)],
        opts: &AskOptions,
        recall: bool,
    ) -> Result<AskReport, AppError> {
        if history.is_empty() {
            return self.ask(tenant, run_id, question, opts, recall);
        }
        use sha2::Digest;
        let digest =
            sha2::Sha256::digest(serde_json::to_vec(&(run_id, history)).unwrap_or_default());
        let sid: String = std::iter::once("chat-".to_string())
            .chain(digest[..8].iter().map(|b| format!("{b:02x}")))
            .collect();
        let key = neuralcore_agents::consciousness::session_key(&tenant.run_id(&sid))?;
        let session = neuralcore_agents::consciousness::Session {
            turns: history
                .iter()
                .map(|(q, a)| {
                    serde_json::json!({"question": q, "answer": a, "abstained": false, "method": "client", "run_id": ""})
                })
                .collect(),
            ..Default::default()
        };
        let mind = self.mind().global();
        // A TTL in case this process dies before it deletes the session below.
        let ttl = Some(std::time::Duration::from_secs(3600));
        mind.write(&key, serde_json::json!(session), "app", ttl)?;
        let opts = AskOptions {
            session: Some(sid),
            ..opts.clone()
        };
        let report = self.ask(tenant, run_id, question, &opts, recall);
        // The conversation lives with the caller: nothing of it stays here.
        let _ = mind.delete(&key);
        report
    }
}

/// Search one of the tenant's collections of `engine` (what [`App::search`] does, for a
/// front end that opened only the engine).
pub fn search(
    engine: &Engine,
    tenant: &Tenant,
    req: &SearchRequest,
) -> Result<SearchResponse, AppError> {
    if blank(&req.query) {
        return Err(AppError::InvalidInput("the query is empty".into()));
    }
    // Unknown collections are not found, never created by a search.
    let stored = require_collection(engine, tenant, &req.collection)?;
    let k = req.k.unwrap_or(engine.config().search.k);
    let res = engine
        .search(
            &stored,
            &req.query,
            k,
            neuralcore_engine::SearchOptions {
                mode: req.mode,
                rerank: req.rerank,
            },
        )
        .map_err(|e| match e {
            // Dropped meanwhile (and perhaps made again): the engine's NotFound for a
            // collection lists every tenant's collections.
            neuralcore_engine::EngineError::NotFound(m) if m.starts_with("collection ") => {
                AppError::NotFound(format!("collection {:?} does not exist", req.collection))
            }
            e => e.into(),
        })?;
    let mut out = SearchResponse::new(&req.query, &req.collection, &res);
    if let Some(dir) = engine.data_dir() {
        let names = jobs::PublicNames::new(dir, &stored);
        for h in &mut out.hits {
            h.path = h.path.take().map(|p| names.of(&p));
            for p in &mut h.provenance {
                p.source_id = names.of(&p.source_id);
                p.uri = names.of(&p.uri);
            }
        }
    }
    Ok(out)
}

/// An engine error about one of the tenant's collections, with a NotFound that cannot list
/// other tenants' collections (the engine's lists every stored name: a collection dropped
/// between the tenant's check and the call would show them).
pub(crate) fn hide_gone(e: neuralcore_engine::EngineError, name: &str) -> AppError {
    match AppError::from(e) {
        AppError::NotFound(_) => AppError::NotFound(format!("collection {name:?} does not exist")),
        other => other,
    }
}

/// The store's name of the tenant's collection `name`, or a NotFound error that lists
/// the tenant's own collections only (the engine's would list every tenant's).
pub fn require_collection(
    engine: &Engine,
    tenant: &Tenant,
    name: &str,
) -> Result<String, AppError> {
    let stored = tenant.stored(name)?;
    if engine
        .store()
        .collection(&stored)
        .map_err(neuralcore_engine::EngineError::from)?
        .is_some()
    {
        return Ok(stored);
    }
    let mine: Vec<String> = engine
        .collections()?
        .iter()
        .filter_map(|c| tenant.owns(&c.name).map(str::to_string))
        .collect();
    Err(AppError::NotFound(if mine.is_empty() {
        format!("collection {name:?} does not exist: nothing has been ingested yet")
    } else {
        format!(
            "collection {name:?} does not exist (collections: {})",
            mine.join(", ")
        )
    }))
}

/// The tenant's name of a stored collection (the stored name when it is not the
/// tenant's, which cannot happen for a run the tenant started).
fn opts_collection_name(tenant: &Tenant, stored: &str) -> String {
    tenant.owns(stored).unwrap_or(stored).to_string()
}

/// The blackboard the config asks for.
pub fn open_mind(config: &Config, data_dir: &Path) -> Result<Mind, AppError> {
    neuralcore_engine::check_data_dir_format(data_dir)?;
    let m = &config.mind;
    let cfg = MindConfig {
        max_value_bytes: m.max_value_bytes,
        run_ttl: (m.run_ttl_secs > 0).then(|| Duration::from_secs(m.run_ttl_secs)),
    };
    Ok(match m.backend {
        MindBackend::Memory => Mind::memory_with(cfg),
        MindBackend::Redis => {
            let mut r = neuralcore_mind::RedisConfig::new(m.redis_url.clone());
            r.prefix = m.redis_prefix.clone();
            r.tenant = m.tenant.clone();
            r.connect_timeout = Duration::from_millis(m.timeout_ms);
            r.io_timeout = Duration::from_millis(m.timeout_ms);
            Mind::redis(r, cfg).map_err(|e| {
                AppError::Unavailable(format!("cannot use Redis at {}: {e}", m.redis_url))
            })?
        }
        MindBackend::Embedded => {
            create_dir(data_dir)?;
            Mind::open_redb(&data_dir.join("mind.redb"), cfg)?
        }
    })
}

/// The memory backend the config asks for.
pub fn open_memory_backend(
    config: &Config,
    data_dir: &Path,
) -> Result<Arc<dyn MemoryBackend>, AppError> {
    let m = &config.memory;
    Ok(match m.backend {
        MemoryBackendKind::Memory => Arc::new(neuralcore_memory::InMemoryBackend::new()),
        MemoryBackendKind::Postgres => Arc::new(
            neuralcore_memory_pg::PgBackend::connect(&m.postgres_url, &m.postgres_schema).map_err(
                |e| match AppError::from(e) {
                    AppError::Unavailable(e) => {
                        AppError::Unavailable(format!("[memory] postgres backend: {e}"))
                    }
                    other => other,
                },
            )?,
        ),
        MemoryBackendKind::Embedded => {
            create_dir(data_dir)?;
            Arc::new(neuralcore_memory::RedbBackend::open(
                &data_dir.join("memory.redb"),
            )?)
        }
    })
}

/// The memory store the config asks for.
pub fn open_memory_store(config: &Config, data_dir: &Path) -> Result<Arc<MemoryStore>, AppError> {
    Ok(Arc::new(MemoryStore::new(
        open_memory_backend(config, data_dir)?,
        config.memory.trust(),
    )?))
}

/// The services the config asks for: the engine, and the LLM and web search when
/// configured.
pub fn services(engine: Arc<Engine>) -> Result<Services, AppError> {
    let cfg: &Config = engine.config();
    let llm = if cfg.llm.is_configured() {
        let client = neuralcore_llm::LlmClient::new(cfg.llm.clone())
            .map_err(|e| AppError::InvalidInput(format!("[llm] in the config: {e}")))?;
        Some(Arc::new(op_cache::cached_llm(&engine, client)))
    } else {
        None
    };
    let web = if cfg.web.enabled() {
        let web = neuralcore_web::WebSearch::new(cfg.web.clone())
            .map_err(|e| AppError::InvalidInput(format!("[web] in the config: {e}")))?;
        Some(Arc::new(op_cache::cached_web(&engine, web)))
    } else {
        None
    };
    Ok(Services {
        llm,
        web,
        ..Services::new(engine)
    })
}

/// What `neuralcore serve` writes to `<data dir>/server.json` while it runs, so other
/// commands on the same data dir can say where it is.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServerInfo {
    /// Where it listens (`http://127.0.0.1:8080`).
    pub url: String,
    /// Its process id.
    pub pid: u32,
}

/// The file a running server describes itself in.
pub fn server_file(data_dir: &Path) -> PathBuf {
    data_dir.join("server.json")
}

/// The server that owns `data_dir`, if one says so and its process is alive.
pub fn running_server(data_dir: &Path) -> Option<ServerInfo> {
    let text = std::fs::read_to_string(server_file(data_dir)).ok()?;
    let info: ServerInfo = serde_json::from_str(&text).ok()?;
    // A file left by a killed server names a process that is gone (or is not us).
    let alive =
        cfg!(not(target_os = "linux")) || Path::new(&format!("/proc/{}", info.pid)).exists();
    alive.then_some(info)
}

/// A fresh run id.
pub fn new_run_id(prefix: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{t}-{}", std::process::id())
}

fn create_dir(dir: &Path) -> Result<(), AppError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| AppError::Internal(format!("cannot create {}: {e}", dir.display())))
}

/// Whether a text holds nothing but white space, as the API's `pattern: "\\S"` means
/// it: Unicode's white space, and also what JSON Schema validators take for it beside
/// (U+001C-U+001F, which Python's `\\s` matches; U+FEFF, which ECMAScript's does). A
/// text of only those is refused like an empty one.
pub fn blank(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}' | '\u{feff}'))
}

#[cfg(test)]
mod blank_tests {
    use super::blank;

    #[test]
    fn only_white_space_as_any_validator_reads_it_is_blank() {
        for s in [
            "",
            " \t\n",
            "\u{1c}",
            "\u{1f}\u{85}",
            "\u{feff}",
            "\u{a0}\u{3000}",
        ] {
            assert!(blank(s), "{s:?}");
        }
        for s in ["a", " a ", "\u{1c}x", "\u{200b}"] {
            assert!(!blank(s), "{s:?}");
        }
    }
}
