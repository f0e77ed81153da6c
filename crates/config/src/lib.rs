//! `neuralcore.toml`: every setting, its default, and environment overrides.
//!
//! Its own crate, over the light crates whose settings it holds (not the index, the
//! models or the stores), so the loader can be fuzzed without building the engine;
//! `neuralcore-engine` re-exports it.
//!
//! The file is looked up as `--config FILE`, else `<data dir>/neuralcore.toml`; a missing
//! file means defaults. Any key can be overridden by an environment variable
//! `NEURALCORE_<SECTION>_<KEY>` (upper case), e.g. `NEURALCORE_KEYWORD_K1=0.9` or
//! `NEURALCORE_INGEST_EXCLUDE='["**/drafts/**"]'`; the value is read as TOML, and as a
//! plain string when it is not valid TOML. `NEURALCORE_<SECTION>_<KEY>_FILE=/path` reads
//! the value from a file instead (its text, without the trailing newline, as a string):
//! how container platforms hand out secrets, so a URL with a password or an API key
//! never sits in the configuration file or the environment (no key may end in `_file`
//! for this to stay unambiguous; a value from a file is always a string). [`TEMPLATE`] documents
//! every key; a test checks that it parses to the defaults and names every key.

use std::path::Path;

use neuralcore_core::analysis::AnalyzerConfig;
use neuralcore_core::bm25::Bm25Params;
use neuralcore_ingest::{LoaderOptions, SentenceChunker, WalkOptions};
use serde::{Deserialize, Serialize};

/// A configuration that cannot be used; the message names the key (or file) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

/// All settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[store]`: where documents, chunks and the embedding cache live.
    pub store: StoreSettings,
    /// `[index]`: where each collection's vector index lives.
    pub index: IndexSettings,
    /// `[ingest]`
    pub ingest: IngestConfig,
    /// `[keyword]`
    pub keyword: KeywordConfig,
    /// `[analyzer]`
    pub analyzer: AnalyzerConfig,
    /// `[search]`
    pub search: SearchConfig,
    /// `[embedding]`
    pub embedding: EmbeddingConfig,
    /// `[vector]`
    pub vector: VectorConfig,
    /// `[rerank]`
    pub rerank: RerankConfig,
    /// `[mind]`
    pub mind: MindSettings,
    /// `[agents]`
    pub agents: AgentsConfig,
    /// `[grade]`
    pub grade: GradeConfig,
    /// `[loop]`
    #[serde(rename = "loop")]
    pub control: LoopConfig,
    /// `[llm]`: an OpenAI-compatible endpoint (none by default).
    pub llm: neuralcore_llm::LlmConfig,
    /// `[web]`: web search through SearxNG and URL ingest (both off by default), and the
    /// guard on the addresses pages are fetched from.
    pub web: neuralcore_web::WebConfig,
    /// `[memory]`: the trust-weighted memory.
    pub memory: MemorySettings,
    /// `[cache]`: the two-tier operation cache.
    pub cache: CacheSettings,
    /// `[telemetry]`: OpenTelemetry spans over OTLP/HTTP (off by default).
    pub telemetry: neuralcore_telemetry::TelemetryConfig,
}

/// `[cache] hot`: where the hot tier lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotTierKind {
    /// In this process, bounded by `hot_max_bytes`.
    #[default]
    Memory,
    /// A Redis server shared by replicas (`cache.redis_url`).
    Redis,
    /// No hot tier.
    Off,
}

/// `[cache] cold`: where the cold tier lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColdTierKind {
    /// `<data dir>/cache.redb`, bounded by `cold_max_bytes`.
    #[default]
    Embedded,
    /// A PostgreSQL server (`cache.postgres_url`).
    Postgres,
    /// No cold tier.
    Off,
}

/// `[cache]`: the tiers, and each cached operation's switch and time to live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSettings {
    /// `memory`, `redis` or `off`.
    pub hot: HotTierKind,
    /// Bound of the in-process hot tier, bytes.
    pub hot_max_bytes: u64,
    /// `embedded`, `postgres` or `off`.
    pub cold: ColdTierKind,
    /// Bound of the cold tier's keys and values, bytes. The embedded file takes up to
    /// about twice this on disk: redb keeps freed pages to reuse, and never shrinks.
    pub cold_max_bytes: u64,
    /// Redis URL (hot tier `redis`).
    pub redis_url: String,
    /// Prefix of every Redis key the cache writes.
    pub redis_prefix: String,
    /// PostgreSQL URL (cold tier `postgres`).
    pub postgres_url: String,
    /// PostgreSQL table of the cold tier.
    pub postgres_table: String,
    /// Largest value cached, bytes.
    pub max_value_bytes: usize,
    /// Cache query embeddings (and those of the sentences `refine` weighs).
    pub query_embedding: bool,
    /// Their time to live, seconds (0: until evicted).
    pub query_embedding_ttl_s: u64,
    /// Cache search results (per collection generation: any change is a miss).
    pub search: bool,
    /// Their time to live, seconds (0: until evicted).
    pub search_ttl_s: u64,
    /// Cache the reranker's scores per (model, query, passage text).
    pub rerank: bool,
    /// Their time to live, seconds (0: until evicted).
    pub rerank_ttl_s: u64,
    /// Cache the evaluator's model scores per (model, query, passage text).
    pub grade: bool,
    /// Their time to live, seconds (0: until evicted).
    pub grade_ttl_s: u64,
    /// Cache LLM completions per (endpoint, model, messages, parameters), per tenant.
    /// Only requests at temperature 0, unless `llm_sampled`.
    pub llm: bool,
    /// Their time to live, seconds (0: until evicted).
    pub llm_ttl_s: u64,
    /// Cache completions sampled at a temperature above 0 too (a repeat then returns
    /// the first sample).
    pub llm_sampled: bool,
    /// Cache web search results and fetched pages.
    pub web: bool,
    /// Their time to live, seconds (0: until evicted); a page's `Cache-Control` can
    /// only shorten it (`no-store`, `no-cache`, `private`: not cached).
    pub web_ttl_s: u64,
    /// Cache memory search results per (tenant, query, options, memory-store version):
    /// any write to the store is a miss. The trust a hit shows is as of the search that
    /// was kept (trust decays over days; keep the TTL short against that).
    pub memory_search: bool,
    /// Their time to live, seconds (0: until evicted).
    pub memory_search_ttl_s: u64,
    /// Cache answer reports (valid only while every collection they drew on is
    /// unchanged). Off by default: an answer also depends on things outside the
    /// documents (an LLM's sampling, agents edited on disk, the live web).
    pub answer: bool,
    /// Their time to live, seconds (0: until evicted).
    pub answer_ttl_s: u64,
    /// Also serve a cached answer for another wording of its question when the two
    /// questions' embeddings have at least this cosine similarity and agree on question
    /// word, numbers, negation and ordinals (0: off; rewordings that differ only in case,
    /// punctuation, articles and contractions always share an answer). Off by default:
    /// on SQuAD 2.0 no threshold below 1.0 kept questions with different answers apart
    /// (`nc-bench paraphrase`, bench/README.md).
    pub answer_paraphrase: f32,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            hot: HotTierKind::Memory,
            hot_max_bytes: 256 << 20,
            cold: ColdTierKind::Embedded,
            cold_max_bytes: 1 << 30,
            redis_url: String::new(),
            redis_prefix: "neuralcore:cache:".into(),
            postgres_url: String::new(),
            postgres_table: "neuralcore_cache".into(),
            max_value_bytes: 4 << 20,
            query_embedding: true,
            query_embedding_ttl_s: 0,
            search: true,
            search_ttl_s: 86_400,
            rerank: true,
            rerank_ttl_s: 0,
            grade: true,
            grade_ttl_s: 0,
            llm: true,
            llm_ttl_s: 86_400,
            llm_sampled: false,
            web: true,
            web_ttl_s: 3_600,
            memory_search: true,
            memory_search_ttl_s: 300,
            answer: false,
            answer_ttl_s: 86_400,
            answer_paraphrase: 0.0,
        }
    }
}

/// `[store] backend`: where documents, chunks, sources and the embedding cache live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackendKind {
    /// `<data dir>/store.redb`.
    #[default]
    Embedded,
    /// A PostgreSQL server (`store.postgres_url`), shared by every process that
    /// connects to it; keyword and vector indexes stay in each process's data dir.
    Postgres,
}

/// `[store]`: the document store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// `embedded` (`<data dir>/store.redb`) or `postgres`.
    pub backend: StoreBackendKind,
    /// PostgreSQL URL (backend `postgres`), TLS settings included
    /// (`?sslmode=verify-full&sslrootcert=...`). Keep the password out of the file:
    /// `NEURALCORE_STORE_POSTGRES_URL(_FILE)`, a libpq password file or `PGPASSWORD`.
    pub postgres_url: String,
    /// PostgreSQL schema holding the store's tables (created and migrated on start).
    pub postgres_schema: String,
    /// Most connections to PostgreSQL held open at once.
    pub postgres_pool: usize,
    /// Batches of each collection kept in the store's journal log, by which indexes in
    /// other processes (replicas) catch up batch by batch; one further behind rebuilds.
    pub journal_keep: u64,
    /// With backend `postgres`, ingest jobs are queued in the store's schema and run by
    /// any process's worker: the lease a worker holds on its job, renewed every third of
    /// it; a worker silent for this long (killed) loses the job to another.
    pub job_lease_secs: u64,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            backend: StoreBackendKind::Embedded,
            postgres_url: "postgres://postgres@127.0.0.1:5432/postgres".into(),
            postgres_schema: "neuralcore_store".into(),
            postgres_pool: 4,
            journal_keep: 1000,
            job_lease_secs: 30,
        }
    }
}

/// `[index] vector`: where a collection's vector index lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VectorBackendKind {
    /// An HNSW graph in this process's data dir (`[vector]` sets it up), caught up from
    /// the store's journal.
    #[default]
    Local,
    /// One HNSW index per collection in PostgreSQL (pgvector), next to the documents
    /// (`[store] backend = "postgres"`), shared by every replica.
    Pgvector,
}

/// `[index]`: the indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IndexSettings {
    /// `local` or `pgvector`.
    pub vector: VectorBackendKind,
    /// With `pgvector`: the most `maintenance_work_mem` (MiB) a rebuild's HNSW build may
    /// ask the server for; it asks for what the collection's vectors need (about 2 KiB
    /// each at 384 dimensions and M 16), at least 64.
    pub pgvector_build_memory_mb: u64,
}

impl Default for IndexSettings {
    fn default() -> Self {
        IndexSettings {
            vector: VectorBackendKind::Local,
            pgvector_build_memory_mb: 2048,
        }
    }
}

/// `[mind] backend`: where the blackboard lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MindBackend {
    /// `<data dir>/mind.redb`.
    #[default]
    Embedded,
    /// In this process only: gone when it ends.
    Memory,
    /// A Redis server (`mind.redis_url`).
    Redis,
}

/// `[memory] backend`: where memories live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryBackendKind {
    /// `<data dir>/memory.redb`.
    #[default]
    Embedded,
    /// In this process only: gone when it ends.
    Memory,
    /// A PostgreSQL server (`memory.postgres_url`).
    Postgres,
}

/// `[memory]`: where memories live, the trust rules and search weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySettings {
    /// `embedded` (`<data dir>/memory.redb`), `memory` (gone when the process ends) or
    /// `postgres`.
    pub backend: MemoryBackendKind,
    /// PostgreSQL URL (backend `postgres`).
    pub postgres_url: String,
    /// PostgreSQL schema holding the tables.
    pub postgres_schema: String,
    /// Trust of a new memory.
    pub initial: f64,
    /// Trust steps of the four signals.
    pub used: f64,
    /// See `used`.
    pub confirmed: f64,
    /// See `used`.
    pub ignored: f64,
    /// See `used`.
    pub corrected: f64,
    /// Half-life of an unused memory's trust, in days (0 = no decay).
    pub half_life_days: f64,
    /// Below this trust a memory is archived.
    pub archive_below: f64,
    /// Days after archiving before a memory is purged (0 = never).
    pub purge_after_days: f64,
    /// Search: weight of vector similarity against BM25.
    pub alpha: f32,
    /// Search: how much trust scales relevance.
    pub trust_weight: f32,
    /// Search: when a query names some speakers, how much memories said by others
    /// are discounted.
    pub speaker_weight: f32,
    /// Search: reorder the best fused candidates with a logistic model over their
    /// features (fused score, keyword, cosine, neighbours in the session, the session's
    /// best, rank, length, speaker, time words).
    pub rerank: bool,
    /// Search: how many fused candidates the reranker sees.
    pub rerank_depth: usize,
    /// Search: the reranker's 10 weights then its bias; empty: the built-in model,
    /// fitted on LoCoMo conversations 1-2 (`neuralcore eval locomo --fit 1-2` prints
    /// this line for other data).
    pub rerank_weights: Vec<f32>,
    /// Search: the same for searches without a query vector (no embedding model, or
    /// `alpha = 0`); empty: the built-in keyword model.
    pub rerank_keyword_weights: Vec<f32>,
    /// Tokens of a session's recent turns kept whole; older turns are folded into the
    /// session's summary.
    pub session_tokens: usize,
    /// Write every answered question of `ask --memory` as an episode memory of its
    /// project and session (otherwise only `memory add` writes long-term memories).
    pub remember_answers: bool,
}

impl Default for MemorySettings {
    fn default() -> Self {
        let t = neuralcore_memory::TrustConfig::default();
        MemorySettings {
            backend: MemoryBackendKind::Embedded,
            postgres_url: "postgres://postgres@127.0.0.1:5432/postgres".into(),
            postgres_schema: "neuralcore".into(),
            initial: t.initial,
            used: t.used,
            confirmed: t.confirmed,
            ignored: t.ignored,
            corrected: t.corrected,
            half_life_days: t.half_life_days,
            archive_below: t.archive_below,
            purge_after_days: t.purge_after_days,
            alpha: 0.5,
            trust_weight: 0.3,
            speaker_weight: 0.3,
            rerank: true,
            rerank_depth: 50,
            rerank_weights: Vec::new(),
            rerank_keyword_weights: Vec::new(),
            session_tokens: 1000,
            remember_answers: false,
        }
    }
}

impl MemorySettings {
    /// Search options with these weights: `k` results under `filter`.
    pub fn search_options(
        &self,
        k: usize,
        filter: neuralcore_memory::Filter,
    ) -> neuralcore_memory::MemorySearchOptions {
        neuralcore_memory::MemorySearchOptions {
            k,
            filter,
            include_superseded: false,
            alpha: self.alpha,
            trust_weight: self.trust_weight,
            speaker_weight: self.speaker_weight,
            rerank: self.reranker(false),
            rerank_keyword: self.reranker(true),
            rerank_depth: self.rerank_depth,
            query_vector: None,
        }
    }

    /// The reranker search uses (`keyword`: for searches without a query vector): none
    /// when `rerank` is off, the configured weights when given (checked by
    /// `Config::validate`, which every load runs), else the built-in model.
    pub fn reranker(&self, keyword: bool) -> Option<neuralcore_memory::MemoryRanker> {
        use neuralcore_memory::MemoryRanker;
        if !self.rerank {
            return None;
        }
        let (weights, built_in) = if keyword {
            (&self.rerank_keyword_weights, MemoryRanker::BUILT_IN_KEYWORD)
        } else {
            (&self.rerank_weights, MemoryRanker::BUILT_IN)
        };
        if weights.is_empty() {
            return Some(built_in);
        }
        MemoryRanker::from_slice(weights).ok()
    }

    /// The trust rules.
    pub fn trust(&self) -> neuralcore_memory::TrustConfig {
        neuralcore_memory::TrustConfig {
            initial: self.initial,
            used: self.used,
            confirmed: self.confirmed,
            ignored: self.ignored,
            corrected: self.corrected,
            half_life_days: self.half_life_days,
            archive_below: self.archive_below,
            purge_after_days: self.purge_after_days,
        }
    }
}

/// `[grade]`: the CRAG evaluator that labels every retrieved chunk CORRECT, AMBIGUOUS or
/// INCORRECT by a score and two thresholds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GradeConfig {
    /// `auto` (the cross-encoder when its model is present, else `features`),
    /// `cross-encoder`, `features` or `llm` (needs `[llm]`).
    pub evaluator: String,
    /// Chunks graded per sub-query (the top of the fused list).
    pub top_k: usize,
    /// Feature evaluator: intercept and one weight per feature (cosine, best_window,
    /// chunk, rare_present, negation_mismatch, rank).
    pub bias: f32,
    /// See `bias`.
    pub weights: Vec<f32>,
    /// Feature evaluator: score ≥ upper is CORRECT, < lower INCORRECT, between AMBIGUOUS.
    pub upper: f32,
    /// See `upper`.
    pub lower: f32,
    /// The same two thresholds for the cross-encoder's score.
    pub cross_upper: f32,
    /// See `cross_upper`.
    pub cross_lower: f32,
    /// The same two thresholds for the trained evaluator's score
    /// (`neuralcore train evaluator`, then `neuralcore calibrate`).
    pub trained_upper: f32,
    /// See `trained_upper`.
    pub trained_lower: f32,
}

impl Default for GradeConfig {
    fn default() -> Self {
        GradeConfig {
            evaluator: "auto".into(),
            top_k: 10,
            // Fitted by `neuralcore calibrate --data ../shared/data/squad2 --articles 1-4
            // --target-precision 0.45` (SQuAD 2.0 articles 1-4 only; 5-8 held out).
            bias: -2.962,
            weights: vec![2.68, 1.496, 0.926, -0.455, -1.56, 2.08],
            upper: 0.8,
            lower: 0.5,
            cross_upper: 0.7,
            cross_lower: 0.1,
            trained_upper: 0.7,
            trained_lower: 0.3,
        }
    }
}

/// `[loop]`: the control loop's budgets and stage settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    /// Most iterations of retrieve → grade → ... → reflect.
    pub max_iterations: u32,
    /// Deadline for a whole question, in milliseconds (0 = none).
    pub deadline_ms: u64,
    /// Most LLM tokens per question (0 = no limit).
    pub max_tokens: u64,
    /// Most LLM cost per question in USD (0 = no limit).
    pub max_cost_usd: f64,
    /// Chunks retrieved per sub-query before grading.
    pub candidates: usize,
    /// Completeness (share of the question's aspects the evidence covers) that ends
    /// the loop.
    pub completeness: f32,
    /// Most sentences in an extractive answer.
    pub answer_sentences: usize,
    /// Strips kept by refinement.
    pub strips: usize,
    /// MMR trade-off between relevance (1) and novelty (0) for extractive answers.
    pub mmr_lambda: f32,
    /// An answer sentence whose support by its cited evidence is below this is removed.
    pub support_threshold: f32,
    /// Let the entity-graph retriever (`graph_search`) join retrieval.
    pub graph: bool,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            max_iterations: 3,
            deadline_ms: 10_000,
            max_tokens: 4096,
            max_cost_usd: 0.0,
            candidates: 20,
            completeness: 0.8,
            answer_sentences: 3,
            strips: 8,
            mmr_lambda: 0.7,
            support_threshold: 0.5,
            graph: false,
        }
    }
}

/// `[mind]`: where the blackboard lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MindSettings {
    /// `embedded` (`<data dir>/mind.redb`), `memory` (gone when the process ends) or
    /// `redis`.
    pub backend: MindBackend,
    /// Redis URL (backend `redis`).
    pub redis_url: String,
    /// First part of every Redis key.
    pub redis_prefix: String,
    /// Tenant: second part of every Redis key.
    pub tenant: String,
    /// Redis connect and I/O timeout, in milliseconds.
    pub timeout_ms: u64,
    /// Longest life of a run's keys, in seconds (0 = no limit).
    pub run_ttl_secs: u64,
    /// Finished asks kept per tenant for the runs list, each with its report and
    /// blackboard; the oldest go first (0 = no count bound: reports stay 7 days,
    /// blackboards `run_ttl_secs`).
    pub runs_kept: usize,
    /// Largest value, in bytes of JSON.
    pub max_value_bytes: usize,
}

impl Default for MindSettings {
    fn default() -> Self {
        MindSettings {
            backend: MindBackend::Embedded,
            redis_url: "redis://127.0.0.1:6379/".into(),
            redis_prefix: "neuralcore".into(),
            tenant: "default".into(),
            timeout_ms: 1000,
            run_ttl_secs: 7 * 24 * 3600,
            runs_kept: 1000,
            max_value_bytes: 1 << 20,
        }
    }
}

/// `[agents]`: where agent definitions are found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// Folders of agent markdown files (relative paths from the working directory).
    pub dirs: Vec<String>,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            dirs: vec!["agents".into()],
        }
    }
}

/// `[rerank]`: the cross-encoder that reorders the top of a result list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerankConfig {
    /// Model name in the model cache (see `embedding.model_dir`).
    pub model: String,
    /// Results reranked when `--rerank` is not given (0 = no reranking).
    pub top_n: usize,
    /// Longest (query, passage) pair in tokens; the passage is cut first.
    pub max_length: usize,
    /// Weight of the first-stage score in a reranked hit's score, in [0, 1]: the score
    /// is `(1 − blend) · reranker + blend · first stage`, the first stage scaled to
    /// [0, 1] over the reranked hits (0 = the reranker's order alone).
    pub blend: f64,
}

impl Default for RerankConfig {
    fn default() -> Self {
        RerankConfig {
            model: "ms-marco-minilm-l-6-v2".into(),
            top_n: 0,
            max_length: 512,
            blend: 0.0,
        }
    }
}

/// `[embedding]`: the sentence-embedding model used for vector and hybrid search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// Model name in the model cache; empty turns embeddings off (keyword-only).
    pub model: String,
    /// Model cache folder; empty means `<data dir>/models`.
    pub model_dir: String,
    /// Texts per forward pass.
    pub batch_size: usize,
    /// How a query (up to 32 word pieces) holds the model's weights: `bf16`, `f32` or
    /// `int8` ([`neuralcore_core::settings::QueryWeights`]).
    pub query_weights: neuralcore_core::settings::QueryWeights,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            model: "all-minilm-l6-v2".into(),
            model_dir: String::new(),
            batch_size: 32,
            query_weights: neuralcore_core::settings::QueryWeights::Bf16,
        }
    }
}

/// `[vector]`: the HNSW index.
pub type VectorConfig = neuralcore_core::settings::HnswParams;

/// How results are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// BM25 only.
    Keyword,
    /// Embedding similarity only.
    Vector,
    /// Both, fused.
    Hybrid,
}

impl std::str::FromStr for SearchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "keyword" => Ok(SearchMode::Keyword),
            "vector" => Ok(SearchMode::Vector),
            "hybrid" => Ok(SearchMode::Hybrid),
            _ => Err(format!(
                "unknown search mode {s:?} (keyword, vector or hybrid)"
            )),
        }
    }
}

impl std::fmt::Display for SearchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SearchMode::Keyword => "keyword",
            SearchMode::Vector => "vector",
            SearchMode::Hybrid => "hybrid",
        })
    }
}

/// How hybrid search fuses the keyword and vector lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// `alpha * minmax(vector) + (1 - alpha) * minmax(keyword)`.
    Convex,
    /// Reciprocal rank fusion: `sum 1 / (rrf_k + rank)`.
    Rrf,
}

/// `[ingest]`: walking, loading and chunking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Globs a file inside a folder must match (empty: every supported format).
    pub include: Vec<String>,
    /// Globs that leave files or folders out.
    pub exclude: Vec<String>,
    /// Follow symbolic links inside folders.
    pub follow_links: bool,
    /// Skip files and folders whose name starts with a dot.
    pub skip_hidden: bool,
    /// Chunk size, in tokens.
    pub chunk_tokens: usize,
    /// Overlap between consecutive chunks, in tokens.
    pub chunk_overlap: usize,
    /// Largest file read whole (md, html, pdf, json), in bytes.
    pub max_file_bytes: u64,
    /// Text files longer than this many characters are split into parts.
    pub max_document_chars: usize,
    /// Commit to the store after this many bytes of text (bounds memory and lost work).
    pub commit_bytes: usize,
    /// Commit to the store after this many new chunks: with an embedding model each
    /// costs an embedding, so this bounds the work a crash loses. A source bigger than
    /// one batch commits in several and resumes after the last one when ingested again.
    pub commit_chunks: usize,
    /// CSV: columns that make the text (empty: all).
    pub csv_text_columns: Vec<String>,
    /// CSV: the id column.
    pub csv_id_column: Option<String>,
    /// CSV: the title column.
    pub csv_title_column: Option<String>,
    /// CSV: field delimiter.
    pub csv_delimiter: char,
}

impl Default for IngestConfig {
    fn default() -> Self {
        let l = LoaderOptions::default();
        let w = WalkOptions::default();
        IngestConfig {
            include: w.include,
            exclude: w.exclude,
            follow_links: w.follow_links,
            skip_hidden: w.skip_hidden,
            chunk_tokens: 256,
            chunk_overlap: 0,
            max_file_bytes: l.max_file_bytes,
            max_document_chars: l.max_document_chars,
            commit_bytes: 32 * 1024 * 1024,
            commit_chunks: 512,
            csv_text_columns: l.csv_text_columns,
            csv_id_column: l.csv_id_column,
            csv_title_column: l.csv_title_column,
            csv_delimiter: l.csv_delimiter,
        }
    }
}

impl IngestConfig {
    /// The walk settings.
    pub fn walk(&self) -> WalkOptions {
        WalkOptions {
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            follow_links: self.follow_links,
            skip_hidden: self.skip_hidden,
        }
    }

    /// The loader settings.
    pub fn loaders(&self) -> LoaderOptions {
        LoaderOptions {
            max_file_bytes: self.max_file_bytes,
            max_document_chars: self.max_document_chars,
            csv_text_columns: self.csv_text_columns.clone(),
            csv_id_column: self.csv_id_column.clone(),
            csv_title_column: self.csv_title_column.clone(),
            csv_delimiter: self.csv_delimiter,
        }
    }

    /// The chunker.
    pub fn chunker(&self) -> SentenceChunker {
        SentenceChunker {
            target_tokens: self.chunk_tokens,
            overlap_tokens: self.chunk_overlap,
        }
    }
}

/// `[keyword]`: BM25 scoring (applied at query time; no re-index needed).
pub type KeywordConfig = Bm25Params;

/// `[search]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// Results returned when `-k` is not given.
    pub k: usize,
    /// Default mode (hybrid falls back to keyword when no model is present).
    pub mode: SearchMode,
    /// How hybrid search fuses its two lists.
    pub fusion: Fusion,
    /// Weight of the vector list in convex fusion (0 = keyword only, 1 = vector only).
    pub alpha: f64,
    /// The `k` of reciprocal rank fusion.
    pub rrf_k: f64,
    /// Candidates each list contributes to fusion (at least the results asked for).
    pub candidates: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            k: 10,
            mode: SearchMode::Hybrid,
            fusion: Fusion::Convex,
            alpha: 0.4,
            rrf_k: 60.0,
            candidates: 100,
        }
    }
}

/// The documented configuration file with every key at its default.
pub const TEMPLATE: &str = r#"# neuralcore.toml — every key, at its default. Put this file in the data dir
# (default ./.neuralcore) or pass --config FILE. Any key can be overridden with an
# environment variable NEURALCORE_<SECTION>_<KEY>, e.g. NEURALCORE_KEYWORD_K1=0.9, or
# read from a file with NEURALCORE_<SECTION>_<KEY>_FILE=/run/secrets/x (for secrets).

[store]
# Where documents, chunks, sources and the embedding cache live: "embedded"
# (<data dir>/store.redb) or "postgres" (shared by every process that connects; each
# keeps its keyword and vector indexes in its own data dir and catches them up from the
# store). Keep a password out of this file: NEURALCORE_STORE_POSTGRES_URL(_FILE), or
# libpq's password file (~/.pgpass, PGPASSFILE, ?passfile=) or PGPASSWORD. TLS as libpq
# spells it: ?sslmode=verify-full&sslrootcert=/path/ca.pem (also verify-ca, require,
# prefer (the default), disable; sslrootcert=system; sslcert and sslkey for a client
# certificate). Every PostgreSQL URL below reads the same way; a Redis URL takes
# rediss:// for TLS, with the same sslrootcert, sslcert and sslkey parameters.
backend = "embedded"
postgres_url = "postgres://postgres@127.0.0.1:5432/postgres"
# The schema holding the tables, created and migrated on start (`neuralcore db migrate`
# does it alone); a schema newer than this binary is refused.
postgres_schema = "neuralcore_store"
postgres_pool = 4
# Batches of each collection kept in the store's journal log: an index in another
# process (a replica, or this one's after a restart) that far behind catches up batch by
# batch; further behind, it rebuilds from the store.
journal_keep = 1000
# With "postgres", ingest jobs (uploads through `serve`) are queued in the schema and
# run by the worker of any process (`serve`, or `neuralcore worker`): the lease a worker
# holds on its job, in seconds, renewed every third of it. A worker silent this long
# (killed) loses the job to another, which resumes it.
job_lease_secs = 30

[index]
# Where each collection's vector index lives: "local" (an HNSW graph in the data dir,
# set up by [vector], caught up from the store) or "pgvector" (an HNSW index per
# collection in PostgreSQL next to the documents, shared by every replica; needs
# [store] backend = "postgres" and the server's `vector` extension; m, ef_construction
# and ef_search come from [vector]). ARCHITECTURE.md says when to pick which.
vector = "local"
# With "pgvector": the most memory (MiB) a rebuild of a collection's HNSW index may ask
# the server for (maintenance_work_mem). It asks for what the vectors need, ~2 KiB each
# at 384 dimensions; a graph that does not fit builds many times slower.
pgvector_build_memory_mb = 2048

[ingest]
# Globs (relative to a folder given to `ingest`) a file must match; empty = every
# format a loader reads (txt, md, html, pdf, json, jsonl, csv, tsv, ...).
include = []
# Globs that leave files or folders out.
exclude = ["**/node_modules/**", "**/target/**"]
# Follow symbolic links inside folders.
follow_links = false
# Skip files and folders whose name starts with a dot.
skip_hidden = true
# Chunk size in tokens (runs of letters/digits and single punctuation marks).
# Chosen on the SciFact train split (see bench/README.md).
chunk_tokens = 256
# Tokens of whole sentences repeated at the start of the next chunk.
chunk_overlap = 0
# Largest file read whole (md, html, pdf, json); txt, jsonl and csv are streamed.
max_file_bytes = 67108864
# Text files longer than this many characters become several documents ("parts").
max_document_chars = 2000000
# Commit to the store after this many bytes of text.
commit_bytes = 33554432
# ... or after this many new chunks (each costs an embedding when there is a model):
# the most work a crash can lose. A file bigger than one batch commits in several,
# is listed as partial meanwhile, and resumes after the last one when ingested again.
commit_chunks = 512
# CSV: columns that make the document text (empty = all columns).
csv_text_columns = []
# CSV: column holding each row's id (default: a column named id or _id).
# csv_id_column = "id"
# CSV: column holding each row's title (default: a column named title).
# csv_title_column = "title"
# CSV: field delimiter (.tsv files always use tab).
csv_delimiter = ","

[keyword]
# BM25 parameters, chosen on the SciFact train split: the fastest setting within
# 0.002 nDCG@10 of the best found (see bench/README.md). Applied at query time: no
# re-index needed.
# BM25 term-frequency saturation.
k1 = 1.2
# BM25 length normalization (0 = none, 1 = full).
b = 0.75
# Weight of a match in the separately indexed title field, added to the body score
# (0 = not scored; titles already count through analyzer.title_in_body).
title_weight = 0.0

[analyzer]
# What goes into the keyword index and how text is split into terms.
# Changing these re-indexes each collection on its next use.
# Snowball stemmer: english, french, german, spanish, italian, portuguese, dutch,
# swedish, norwegian, danish, finnish, russian, or none.
stemmer = "english"
# Stop words: "english" (Lucene's list), "none", or a list of words.
stopwords = "english"
# Drop tokens shorter than this many characters.
min_token_len = 1
# Index each chunk with its document title in front (a contextual chunk header).
title_in_body = true
# Fold Latin letters with diacritics to ASCII (é → e, ß → ss), so "fiancee" finds
# "fiancée". Before the stemmer when it is English (or none); after it for another
# language, whose stemmer reads the accents (there a word typed without them finds
# the accented one only when both stem alike).
fold_accents = true

[search]
# Results returned when -k is not given.
k = 10
# Default mode: keyword (BM25), vector (embeddings) or hybrid (both, fused). Hybrid
# and vector need the embedding model; without it search is keyword-only and says so.
mode = "hybrid"
# Hybrid fusion: "convex" (min-max-normalized scores, weighted by alpha) or "rrf"
# (reciprocal rank fusion).
fusion = "convex"
# Convex fusion: weight of the vector scores (keyword scores get 1 - alpha).
# Fusion and alpha were chosen on the SciFact train split (bench/tuning/README.md):
# convex 0.4 gave nDCG@10 0.734, the best RRF (rrf_k 10) 0.724.
alpha = 0.4
# Reciprocal rank fusion: score = sum over lists of 1 / (rrf_k + rank).
rrf_k = 60.0
# Candidates taken from each list before fusion.
candidates = 100

[embedding]
# Sentence-embedding model (a folder in the model cache: `neuralcore models pull`).
# Empty = no embeddings: keyword search only.
model = "all-minilm-l6-v2"
# Model cache folder; empty = <data dir>/models.
model_dir = ""
# Texts per forward pass while embedding.
batch_size = 32
# How a query (up to 32 word pieces) holds the weights: "bf16" (half the bytes to
# stream; worst cosine 0.99999 against f32 on the parity fixture, SciFact nDCG@10
# unchanged, bench/README.md), "f32", or "int8" (a quarter; worst cosine 0.9986).
# Documents always use f32. NEURALCORE_ISA=avx512|avx2|portable (environment only)
# forces the encoder's instruction set below what the CPU runs.
query_weights = "bf16"

[vector]
# HNSW index over the chunk embeddings (one per collection and model).
# Links per node (twice this on the bottom layer).
m = 16
# Candidate list while inserting (higher: better graph, slower ingest).
ef_construction = 200
# Candidate list while searching (higher: better recall, slower queries); raised to
# the number of results asked for. 64 gives recall@10 0.992 against exact search on
# SciFact's 7,566 chunk vectors (bench/README.md), but 0.870 at a million vectors,
# where 256 gives 0.964 (`nc-bench million`). Changing it keeps the vector snapshot.
ef_search = 64
# Collections with fewer vectors than this are searched exactly (no graph walk).
exact_below = 2048

[rerank]
# Cross-encoder that rescores the top results (`search --rerank N`): a BERT-family
# folder with config.json (BertForSequenceClassification, one label), tokenizer.json
# and model.safetensors, placed in the model cache with `neuralcore models pull
# cross-encoder/ms-marco-MiniLM-L-6-v2` (the Hugging Face hub) or
# `neuralcore models pull --from DIR NAME`. A hub repository id works here too.
model = "ms-marco-minilm-l-6-v2"
# Results reranked when --rerank is not given (0 = none).
top_n = 0
# Longest (query, passage) pair in tokens; the passage is cut first.
max_length = 512
# Weight of the first-stage score in a reranked hit's score, in [0, 1]:
# (1 - blend) * reranker + blend * first stage (scaled to [0, 1] over the reranked
# hits). 0 keeps the reranker's order alone. `neuralcore train reranker` writes a
# model (name it "neuralcore-reranker" above) that is meant to be blended.
blend = 0.0

[mind]
# The blackboard that tools and agents share: "embedded" (<data dir>/mind.redb),
# "memory" (gone when the process ends) or "redis".
backend = "embedded"
# Redis (backend = "redis"): URL, key prefix and tenant (keys are
# <prefix>:<tenant>:...), connect and I/O timeout in milliseconds.
redis_url = "redis://127.0.0.1:6379/"
redis_prefix = "neuralcore"
tenant = "default"
timeout_ms = 1000
# Longest life of a run's keys, in seconds (0 = no limit): abandoned runs expire.
run_ttl_secs = 604800
# Finished asks kept per tenant for the runs list (GET /v1/runs), each with its
# report and blackboard (about 140 KB together in a soak); the oldest go first.
# 0 = no count bound (reports stay 7 days, blackboards run_ttl_secs).
runs_kept = 1000
# Largest value, in bytes of JSON.
max_value_bytes = 1048576

[agents]
# Folders of agent markdown files (*.md: YAML front matter + instructions). Files are
# re-read when they change; a broken edit is rejected and the previous version kept.
dirs = ["agents"]

[grade]
# The CRAG evaluator: "auto" (the trained evaluator when `neuralcore train evaluator`
# has written one, else the cross-encoder when its model is pulled, else "features"),
# "trained", "cross-encoder", "features" or "llm" (needs [llm]).
evaluator = "auto"
# Chunks graded per sub-query (the top of the fused list).
top_k = 10
# Feature evaluator: sigmoid(bias + weights . features), features in [0, 1]: cosine of
# the sentence embeddings, weighted coverage of the question's rare terms by the best
# sentence (with its neighbour), by the whole chunk, presence of the rarest term, and
# a negation mismatch, and 1/(1 + rank) in the retrieval list. `neuralcore calibrate`
# fits them on a labelled set.
# These defaults were fitted on SQuAD 2.0 dev articles 1-4 (a chunk is relevant when
# it holds a gold answer), target precision 0.45 for CORRECT, 0.97 for INCORRECT
# (bench/README.md, "Answer quality").
bias = -2.962
weights = [2.68, 1.496, 0.926, -0.455, -1.56, 2.08]
# score >= upper: CORRECT; score < lower: INCORRECT; between: AMBIGUOUS (verified).
upper = 0.8
lower = 0.5
# The same thresholds for the cross-encoder's score.
cross_upper = 0.7
cross_lower = 0.1
# The same thresholds for the trained evaluator's score.
trained_upper = 0.7
trained_lower = 0.3

[loop]
# Most iterations of retrieve -> grade -> verify -> refine -> generate -> reflect.
max_iterations = 3
# Deadline per question in milliseconds (0 = none); expensive stages are skipped first
# when it runs short.
deadline_ms = 10000
# Most LLM tokens and cost (USD) per question (0 = no limit).
max_tokens = 4096
max_cost_usd = 0.0
# Chunks retrieved per sub-query before grading.
candidates = 20
# Completeness (share of the question's aspects covered by kept evidence) that ends
# the loop; below it, and within budget, the gaps drive another iteration.
completeness = 0.8
# Most sentences in an extractive answer (factual questions get one, comparisons and
# multi-hop questions two), strips kept by refinement, and the MMR
# trade-off between relevance (1) and novelty (0).
answer_sentences = 3
strips = 8
mmr_lambda = 0.7
# An answer sentence whose support by the evidence it cites is below this is removed.
support_threshold = 0.5
# The entity-graph retriever (question entities -> chunks naming them -> neighbours ->
# related entities) joins retrieval. Off by default: on SQuAD 2.0 and HotpotQA it
# changed no quality figure and cost ~8 ms per question (bench/README.md).
graph = false

[llm]
# An OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM, llama.cpp's
# server, LM Studio): requests go to {base_url}/chat/completions. Empty = no LLM: the
# engine answers extractively. E.g. "http://127.0.0.1:8080/v1".
base_url = ""
# Model name sent with each request (empty: not sent; single-model servers accept that).
model = ""
# API key: set api_key = "..." here, or leave it out and it is read from the
# environment variable named by api_key_env (empty = never read the environment).
api_key_env = "OPENAI_API_KEY"
# Per attempt (whole response) and connect timeouts, in milliseconds.
timeout_ms = 30000
connect_timeout_ms = 2000
# Retries on transient errors (connection refused, timeouts, 429, 5xx, malformed
# replies), with exponential backoff from backoff_ms (with jitter), each wait capped
# at max_backoff_ms (Retry-After is honoured up to that cap).
max_retries = 2
backoff_ms = 200
max_backoff_ms = 10000
temperature = 0.0
# Cap on generated tokens per request (0 = the server decides).
max_tokens = 512
# Stream the reply (server-sent events).
stream = false
# USD per million prompt / completion tokens (0 = unpriced: no cost reported).
price_input_per_mtok = 0.0
price_output_per_mtok = 0.0

[web]
# A SearxNG instance used to verify AMBIGUOUS chunks (its JSON API must be enabled:
# search.formats in its settings.yml). Empty = no web search.
searxng_url = ""
# Per request (search or page), in milliseconds.
timeout_ms = 3000
# Results kept per search; fetch and clean each result's page (else the snippet only);
# largest page read, in bytes.
max_results = 5
fetch_pages = true
max_page_bytes = 2097152
# SearxNG categories and language ("" = not sent).
categories = "general"
language = "en"
user_agent = "neuralcore/0.1.0"
# Let users add pages by URL (MCP `ingest_url`, POST /v1/collections/{name}/urls).
ingest_urls = false
# Pages (URL ingest, search results, redirects) are fetched only from public addresses:
# loopback, private, link-local, unique-local and reserved ones are refused, also when a
# name resolves to them. Open it up entirely, or for some addresses, ranges or
# address:port pairs, e.g. ["10.1.0.0/16", "127.0.0.1:8081"].
allow_private_urls = false
allow_addresses = []

[memory]
# Where memories, their audit log and relations live: "embedded"
# (<data dir>/memory.redb), "memory" (gone when the process ends) or "postgres".
backend = "embedded"
postgres_url = "postgres://postgres@127.0.0.1:5432/postgres"
postgres_schema = "neuralcore"
# Trust: a new memory starts at `initial`; signals move it by these steps, clamped to
# [0, 1]: used (its evidence was cited), confirmed (by a user), ignored (retrieved but
# graded INCORRECT or not cited), corrected (by a user).
initial = 0.5
used = 0.05
confirmed = 0.1
ignored = -0.05
corrected = -0.1
# An unused memory's trust halves every half_life_days (0 = no decay); below
# archive_below it is archived (out of search, restorable), and purged
# purge_after_days after that (0 = never).
half_life_days = 90.0
archive_below = 0.3
purge_after_days = 30.0
# Search: weight of vector similarity against BM25, and how much trust scales relevance
# (relevance x (1 - w + w x trust)).
alpha = 0.5
trust_weight = 0.3
# A query naming some of the memories' speakers (their `speaker` metadata) but not all
# discounts what the others said: score x (1 - speaker_weight).
speaker_weight = 0.3
# Second stage: a logistic model reorders the best `rerank_depth` fused candidates by
# their features (fused score, keyword, cosine, how well their neighbours in the session
# and the session as a whole match, rank, length, speaker, time words).
# rerank_weights: 10 weights then the bias; empty = the built-in model (fitted on
# LoCoMo conversations 1-2; `neuralcore eval locomo --fit RANGE` fits one to other data).
# rerank_keyword_weights: the same for searches without a query vector (no embedding
# model, or alpha = 0).
rerank = true
rerank_depth = 50
rerank_weights = []
rerank_keyword_weights = []
# Short-term memory: a session's recent turns (ask --session) live on the Mind; past
# this many tokens the oldest are folded into the session's summary.
session_tokens = 1000
# Long-term memories are written only by `memory add`, unless this rule is on: every
# answered question of `ask --memory` becomes an episode memory of its project/session.
remember_answers = false

[cache]
# The hot tier: "memory" (in this process, bounded by hot_max_bytes), "redis" (shared by
# replicas: redis_url, keys under redis_prefix) or "off".
hot = "memory"
hot_max_bytes = 268435456
# The cold tier: "embedded" (<data dir>/cache.redb, bounded by cold_max_bytes of keys and
# values; the file takes up to about twice that on disk), "postgres" (postgres_url, table
# postgres_table) or "off". A cold hit is copied into the hot tier. A tier that fails is
# bypassed for a few seconds, never the request's failure.
cold = "embedded"
cold_max_bytes = 1073741824
redis_url = ""
redis_prefix = "neuralcore:cache:"
postgres_url = ""
postgres_table = "neuralcore_cache"
# Larger values are not cached, bytes.
max_value_bytes = 4194304
# Each operation: on/off, and its time to live in seconds (0: until evicted). Keys hold
# everything that changes a result (tenant, settings, version, collection generation),
# so a changed collection or setting is a miss, never a stale hit.
# query_embedding also holds the sentences refine compares with the question.
query_embedding = true
query_embedding_ttl_s = 0
search = true
search_ttl_s = 86400
# Reranker and evaluator scores per (model, query, passage text).
rerank = true
rerank_ttl_s = 0
grade = true
grade_ttl_s = 0
# LLM completions per tenant, (endpoint, model, messages, parameters); only those at
# temperature 0 unless llm_sampled (a repeat would then return the first sample).
llm = true
llm_ttl_s = 86400
llm_sampled = false
# Web search results and fetched pages; a page's Cache-Control can only shorten web_ttl_s
# (no-store, no-cache, private: not cached).
web = true
web_ttl_s = 3600
# Memory searches per memory-store version: any memory write is a miss. A hit shows trust
# as of the search it kept (trust decays over days: keep this TTL short).
memory_search = true
memory_search_ttl_s = 300
# Whole answer reports, valid while every collection they drew on is unchanged. Off by
# default: an answer also depends on an LLM's sampling, agents on disk and the web.
answer = false
answer_ttl_s = 86400
# Rewordings that differ only in case, punctuation, articles and contractions share an
# answer. Also serve other wordings whose embeddings are at least this similar (cosine)
# and agree on question word, numbers, negation and ordinals (0: off). Off by default: on
# SQuAD 2.0 no threshold below 1.0 kept questions with different answers apart
# (`nc-bench paraphrase`).
answer_paraphrase = 0.0

[telemetry]
# OpenTelemetry spans of every request, ask, loop iteration and stage, tool run, search,
# embedding batch and LLM call (GenAI semantic conventions: model, tokens, cost), exported
# over OTLP/HTTP (protobuf). W3C trace context is taken from incoming requests'
# traceparent header and sent on outgoing LLM and web requests; the ask report's
# trace_id and the X-Trace-Id response header name the trace.
enabled = false
# The OTLP/HTTP traces endpoint: Arize Phoenix http://127.0.0.1:6006/v1/traces, Langfuse
# https://cloud.langfuse.com/api/public/otel/v1/traces (with the Authorization header
# below), a collector or Jaeger http://127.0.0.1:4318/v1/traces.
endpoint = "http://127.0.0.1:6006/v1/traces"
# Headers of every export, name=value pairs separated by commas, e.g. Langfuse's
# "Authorization=Basic <base64 of public-key:secret-key>". A secret: keep it out of this
# file (NEURALCORE_TELEMETRY_HEADERS or NEURALCORE_TELEMETRY_HEADERS_FILE); never shown.
# headers = ""
# The share of traces kept (0.0-1.0), decided at each trace's root; a request that comes
# with a traceparent follows its sampled flag.
sampling = 1.0
# service.name of the exported resource, and the Phoenix project the spans go to.
service_name = "neuralcore"
project = "neuralcore"
# Most finished spans waiting for export (more are dropped while the endpoint is away),
# and one export request's timeout in milliseconds.
queue = 8192
timeout_ms = 5000
"#;

const SECTIONS: &[&str] = &[
    "store",
    "index",
    "ingest",
    "keyword",
    "analyzer",
    "search",
    "embedding",
    "vector",
    "rerank",
    "mind",
    "agents",
    "grade",
    "loop",
    "llm",
    "web",
    "memory",
    "cache",
    "telemetry",
];

impl Config {
    /// Load `file` if it exists (defaults otherwise), then apply `NEURALCORE_*`
    /// overrides from `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let text = match file {
            Some(f) if f.exists() => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| ConfigError(format!("{}: {e}", f.display())))?,
            ),
            _ => None,
        };
        Config::parse(text.as_deref(), file, env)
    }

    /// A `neuralcore.toml`'s `text` (`None`: defaults), then `NEURALCORE_*` overrides
    /// from `env`, validated; errors name `file` when given.
    pub fn parse(
        text: Option<&str>,
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut value = match text {
            Some(text) => text.parse::<toml::Table>().map_err(|e| {
                ConfigError(match file {
                    Some(f) => format!("{}: {e}", f.display()),
                    None => e.to_string(),
                })
            })?,
            None => toml::Table::new(),
        };
        let mut from_env: std::collections::HashMap<String, String> = Default::default();
        for (k, v) in env {
            let Some(rest) = k.strip_prefix("NEURALCORE_") else {
                continue;
            };
            let rest = rest.to_ascii_lowercase();
            let Some(section) = SECTIONS.iter().find(|s| rest.starts_with(&format!("{s}_"))) else {
                continue;
            };
            let mut key = &rest[section.len() + 1..];
            let parsed = if let Some(base) = key.strip_suffix("_file") {
                // A secret handed out as a file: its text, as a string. The message names
                // the variable and the path, never the content.
                key = base;
                let text = std::fs::read_to_string(&v)
                    .map_err(|e| ConfigError(format!("{k}: cannot read {v}: {e}")))?;
                toml::Value::String(text.trim_end_matches(['\n', '\r']).to_string())
            } else {
                format!("v = {v}")
                    .parse::<toml::Table>()
                    .ok()
                    .and_then(|mut t| t.remove("v"))
                    .unwrap_or(toml::Value::String(v.clone()))
            };
            let id = format!("{section}_{key}");
            if let Some(other) = from_env.insert(id, k.clone()) {
                return Err(ConfigError(format!(
                    "{other} and {k} set the same key: keep one"
                )));
            }
            let table = value
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match table {
                toml::Value::Table(t) => {
                    t.insert(key.to_string(), parsed);
                }
                _ => return Err(ConfigError(format!("[{section}] is not a table"))),
            }
        }
        let cfg: Config = toml::Value::Table(value)
            .try_into()
            .map_err(|e: toml::de::Error| {
                ConfigError(format!(
                    "{}{}",
                    file.map(|f| format!("{}: ", f.display()))
                        .unwrap_or_default(),
                    e.message()
                ))
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError(m));
        self.telemetry.check().map_err(ConfigError)?;
        if self.store.postgres_pool < 2 {
            // A batch holds one connection while it reads the embedding cache through
            // another.
            return bad(format!(
                "store.postgres_pool must be at least 2 (got {})",
                self.store.postgres_pool
            ));
        }
        if self.store.job_lease_secs < 3 {
            return bad(format!(
                "store.job_lease_secs must be at least 3 (got {})",
                self.store.job_lease_secs
            ));
        }
        if self.index.vector == VectorBackendKind::Pgvector
            && self.store.backend != StoreBackendKind::Postgres
        {
            return bad(
                "index.vector = \"pgvector\" keeps vectors next to the documents: it needs \
                 store.backend = \"postgres\""
                    .into(),
            );
        }
        if self.ingest.chunk_tokens < 8 {
            return bad(format!(
                "ingest.chunk_tokens must be at least 8 (got {})",
                self.ingest.chunk_tokens
            ));
        }
        self.memory.trust().validate().map_err(ConfigError)?;
        for (key, w) in [
            ("rerank_weights", &self.memory.rerank_weights),
            (
                "rerank_keyword_weights",
                &self.memory.rerank_keyword_weights,
            ),
        ] {
            if !w.is_empty() {
                neuralcore_memory::MemoryRanker::from_slice(w)
                    .map_err(|e| ConfigError(format!("memory.{key}: {e}")))?;
            }
        }
        for entry in &self.web.allow_addresses {
            neuralcore_web::Allowed::parse(entry).map_err(|e| ConfigError(format!("web.{e}")))?;
        }
        if self.memory.rerank && self.memory.rerank_depth == 0 {
            return bad("memory.rerank_depth must be at least 1 when memory.rerank is on".into());
        }
        let g = &self.grade;
        if !["auto", "trained", "cross-encoder", "features", "llm"].contains(&g.evaluator.as_str())
        {
            return bad(format!(
                "grade.evaluator must be auto, trained, cross-encoder, features or llm (got {:?})",
                g.evaluator
            ));
        }
        if g.weights.len() != 6 {
            return bad(format!(
                "grade.weights needs 6 numbers (cosine, best_window, chunk, rare_present, \
                 negation_mismatch, rank), got {}",
                g.weights.len()
            ));
        }
        for (lo, up, name) in [
            (g.lower, g.upper, "grade.lower/upper"),
            (
                g.cross_lower,
                g.cross_upper,
                "grade.cross_lower/cross_upper",
            ),
        ] {
            if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&up) || lo > up {
                return bad(format!(
                    "{name} must satisfy 0 <= lower <= upper <= 1 (got {lo}, {up})"
                ));
            }
        }
        if g.top_k == 0 || self.control.candidates == 0 || self.control.max_iterations == 0 {
            return bad(
                "grade.top_k, loop.candidates and loop.max_iterations must be at least 1".into(),
            );
        }
        if !(0.0..=1.0).contains(&self.control.mmr_lambda) {
            return bad("loop.mmr_lambda must be in [0, 1]".into());
        }
        if self.ingest.chunk_overlap * 2 > self.ingest.chunk_tokens {
            return bad("ingest.chunk_overlap must be at most half of ingest.chunk_tokens".into());
        }
        if !(0.0..=1.0).contains(&self.keyword.b) {
            return bad(format!(
                "keyword.b must be within [0, 1] (got {})",
                self.keyword.b
            ));
        }
        if !(self.keyword.k1 >= 0.0 && self.keyword.k1.is_finite()) {
            return bad(format!(
                "keyword.k1 must be a finite number >= 0 (got {})",
                self.keyword.k1
            ));
        }
        if !(self.keyword.title_weight >= 0.0 && self.keyword.title_weight.is_finite()) {
            return bad("keyword.title_weight must be a finite number >= 0".into());
        }
        if self.search.k == 0 {
            return bad("search.k must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.search.alpha) {
            return bad(format!(
                "search.alpha must be within [0, 1] (got {})",
                self.search.alpha
            ));
        }
        if !(self.search.rrf_k >= 0.0 && self.search.rrf_k.is_finite()) {
            return bad("search.rrf_k must be a finite number >= 0".into());
        }
        if self.search.candidates == 0 {
            return bad("search.candidates must be at least 1".into());
        }
        if self.rerank.max_length < 8 {
            return bad("rerank.max_length must be at least 8".into());
        }
        if !(0.0..=1.0).contains(&self.rerank.blend) {
            return bad(format!(
                "rerank.blend must be within [0, 1] (got {})",
                self.rerank.blend
            ));
        }
        if self.embedding.batch_size == 0 {
            return bad("embedding.batch_size must be at least 1".into());
        }
        if self.vector.m < 2 || self.vector.m > 256 {
            return bad(format!(
                "vector.m must be within [2, 256] (got {})",
                self.vector.m
            ));
        }
        if self.vector.ef_construction == 0 || self.vector.ef_search == 0 {
            return bad("vector.ef_construction and vector.ef_search must be at least 1".into());
        }
        if !self.ingest.csv_delimiter.is_ascii() {
            return bad("ingest.csv_delimiter must be one ASCII character".into());
        }
        neuralcore_core::analysis::Analyzer::new(&self.analyzer).map_err(ConfigError)?;
        neuralcore_ingest::walk(&[], &self.ingest.walk()).map_err(ConfigError)?;
        Ok(())
    }

    /// The effective configuration as TOML, to show: the password of every server URL
    /// is replaced by `***` (the LLM's API key is never serialized at all).
    pub fn to_toml(&self) -> String {
        let mut c = self.clone();
        for url in [
            &mut c.store.postgres_url,
            &mut c.cache.redis_url,
            &mut c.cache.postgres_url,
            &mut c.memory.postgres_url,
            &mut c.mind.redis_url,
            &mut c.web.searxng_url,
            &mut c.llm.base_url,
        ] {
            *url = neuralcore_core::settings::redact_url(url);
        }
        toml::to_string_pretty(&c).expect("serializable")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_toml_hides_every_password() {
        let mut c = Config::default();
        c.cache.redis_url = "redis://:pw-a@127.0.0.1:6379/".into();
        c.cache.postgres_url = "postgres://u:pw-b@127.0.0.1/db".into();
        c.memory.postgres_url = "postgres://u:pw-c@127.0.0.1/db?sslmode=disable".into();
        c.mind.redis_url = "redis://u:pw-d@127.0.0.1/".into();
        c.web.searxng_url = "http://u:pw-e@127.0.0.1:8888".into();
        c.llm.base_url = "http://u:pw-f@127.0.0.1:8080/v1?password=pw-g".into();
        c.llm.api_key = Some("pw-h".into());
        c.store.postgres_url = "postgres://u:pw-i@127.0.0.1/db".into();
        let shown = c.to_toml();
        for pw in [
            "pw-a", "pw-b", "pw-c", "pw-d", "pw-e", "pw-f", "pw-g", "pw-h", "pw-i",
        ] {
            assert!(!shown.contains(pw), "{pw} in\n{shown}");
        }
        assert!(shown.contains("postgres://u:***@127.0.0.1/db?sslmode=disable"));
    }

    #[test]
    fn template_is_the_defaults_and_names_every_key() {
        let from_template: Config = toml::from_str(TEMPLATE).unwrap();
        assert_eq!(from_template, Config::default());
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        for (section, keys) in defaults.as_table().unwrap() {
            assert!(
                TEMPLATE.contains(&format!("[{section}]")),
                "section {section} undocumented"
            );
            for key in keys.as_table().unwrap().keys() {
                assert!(
                    TEMPLATE.contains(&format!("\n{key} ="))
                        || TEMPLATE.contains(&format!("# {key} =")),
                    "{section}.{key} undocumented"
                );
            }
        }
        for section in SECTIONS {
            assert!(defaults.get(section).is_some());
        }
    }

    #[test]
    fn secrets_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("pg-url");
        std::fs::write(
            &url,
            "postgres://nc:s3cret@db:5432/nc?sslmode=verify-full\n",
        )
        .unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "sk-123").unwrap();
        let var = |k: &str, p: &Path| (k.to_string(), p.display().to_string());
        let c = Config::load(
            None,
            vec![
                var("NEURALCORE_STORE_POSTGRES_URL_FILE", &url),
                var("NEURALCORE_LLM_API_KEY_FILE", &key),
            ],
        )
        .unwrap();
        assert_eq!(
            c.store.postgres_url,
            "postgres://nc:s3cret@db:5432/nc?sslmode=verify-full"
        );
        assert_eq!(c.llm.api_key.as_deref(), Some("sk-123"));
        assert!(!c.to_toml().contains("s3cret"));
        // A missing file names the variable and the path; both forms at once are refused.
        let missing = dir.path().join("missing");
        let e = Config::load(
            None,
            vec![var("NEURALCORE_STORE_POSTGRES_URL_FILE", &missing)],
        )
        .unwrap_err();
        assert!(
            e.0.contains("NEURALCORE_STORE_POSTGRES_URL_FILE") && e.0.contains("missing"),
            "{e}"
        );
        let e = Config::load(
            None,
            vec![
                var("NEURALCORE_STORE_POSTGRES_URL_FILE", &url),
                (
                    "NEURALCORE_STORE_POSTGRES_URL".into(),
                    "postgres://x@h/d".into(),
                ),
            ],
        )
        .unwrap_err();
        assert!(e.0.contains("keep one"), "{e}");
    }

    #[test]
    fn env_overrides_and_clear_errors() {
        let env = vec![
            ("NEURALCORE_KEYWORD_K1".to_string(), "0.9".to_string()),
            ("NEURALCORE_INGEST_EXCLUDE".into(), r#"["**/x/**"]"#.into()),
            ("NEURALCORE_ANALYZER_STEMMER".into(), "none".into()),
            ("NEURALCORE_HOME".into(), "/ignored".into()),
        ];
        let c = Config::load(None, env).unwrap();
        assert_eq!(c.keyword.k1, 0.9);
        // pgvector keeps vectors next to the documents: not with the embedded store.
        let pgv = |store: &str| {
            Config::load(
                None,
                vec![
                    (
                        "NEURALCORE_INDEX_VECTOR".to_string(),
                        "pgvector".to_string(),
                    ),
                    ("NEURALCORE_STORE_BACKEND".into(), store.into()),
                ],
            )
        };
        let e = pgv("embedded").unwrap_err();
        assert!(
            e.to_string().contains("store.backend = \"postgres\""),
            "{e}"
        );
        assert_eq!(
            pgv("postgres").unwrap().index.vector,
            VectorBackendKind::Pgvector
        );
        let pool = vec![(
            "NEURALCORE_STORE_POSTGRES_POOL".to_string(),
            "1".to_string(),
        )];
        let e = Config::load(None, pool).unwrap_err();
        assert!(
            e.to_string().contains("postgres_pool must be at least 2"),
            "{e}"
        );
        assert_eq!(c.ingest.exclude, vec!["**/x/**"]);
        assert_eq!(c.analyzer.stemmer, "none");
        // The memory reranker: weights from the config, or clear errors.
        let w: Vec<String> = (0..11).map(|i| format!("{i}.5")).collect();
        let c = Config::load(
            None,
            vec![(
                "NEURALCORE_MEMORY_RERANK_WEIGHTS".into(),
                format!("[{}]", w.join(",")),
            )],
        )
        .unwrap();
        let r = c.memory.reranker(false).unwrap();
        assert_eq!((r.weights[2], r.bias), (2.5, 10.5));
        assert_eq!(
            c.memory.search_options(5, Default::default()).rerank,
            Some(r)
        );
        let off = vec![("NEURALCORE_MEMORY_RERANK".into(), "false".into())];
        let off = Config::load(None, off).unwrap();
        assert_eq!(off.memory.reranker(false), None);
        assert_eq!(off.memory.reranker(true), None);
        assert_eq!(
            c.memory.reranker(true),
            Some(neuralcore_memory::MemoryRanker::BUILT_IN_KEYWORD)
        );
        let e = Config::load(
            None,
            vec![(
                "NEURALCORE_MEMORY_RERANK_WEIGHTS".into(),
                "[1.0, 2.0]".into(),
            )],
        )
        .unwrap_err();
        assert!(e.to_string().contains("memory.rerank_weights"), "{e}");
        let e = Config::load(
            None,
            vec![(
                "NEURALCORE_MEMORY_RERANK_KEYWORD_WEIGHTS".into(),
                "[1.0]".into(),
            )],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("memory.rerank_keyword_weights"),
            "{e}"
        );
        let e = Config::load(
            None,
            vec![("NEURALCORE_MEMORY_RERANK_DEPTH".into(), "0".into())],
        )
        .unwrap_err();
        assert!(e.to_string().contains("rerank_depth"), "{e}");
        let e =
            Config::load(None, vec![("NEURALCORE_KEYWORD_KONE".into(), "1".into())]).unwrap_err();
        assert!(e.to_string().contains("kone"), "{e}");
        let e = Config::load(None, vec![("NEURALCORE_KEYWORD_B".into(), "2".into())]).unwrap_err();
        assert!(e.to_string().contains("keyword.b"), "{e}");
        // The query path's weight format: the documented names, and a clear error.
        let c = Config::load(
            None,
            vec![("NEURALCORE_EMBEDDING_QUERY_WEIGHTS".into(), "int8".into())],
        )
        .unwrap();
        assert_eq!(
            c.embedding.query_weights,
            neuralcore_core::settings::QueryWeights::Int8
        );
        let e = Config::load(
            None,
            vec![("NEURALCORE_EMBEDDING_QUERY_WEIGHTS".into(), "fp8".into())],
        )
        .unwrap_err();
        assert!(e.to_string().contains("bf16"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("neuralcore.toml");
        std::fs::write(&f, "[keyword\nk1 = ").unwrap();
        let e = Config::load(Some(&f), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("neuralcore.toml"), "{e}");
        std::fs::write(&f, "[ingest]\nchunk_tokens = \"many\"\n").unwrap();
        let e = Config::load(Some(&f), Vec::new()).unwrap_err();
        assert!(
            e.to_string().contains("chunk_tokens") || e.to_string().contains("invalid type"),
            "{e}"
        );
    }
}
