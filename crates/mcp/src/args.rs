//! The tools' typed arguments: their JSON Schemas (what a client lists) are generated
//! from these types, and their doc comments are the descriptions an LLM reads.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_collection() -> String {
    neuralcore_core::DEFAULT_COLLECTION.into()
}

/// How to search.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// BM25 over the words.
    Keyword,
    /// Embedding similarity (meaning, not words).
    Vector,
    /// Both, fused (usually the best).
    Hybrid,
}

/// `search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for: a question or keywords.
    pub query: String,
    /// The collection to search (default `default`).
    #[serde(default = "default_collection")]
    pub collection: String,
    /// How many chunks to return (default: the server's `search.k`, at most 100).
    #[serde(default)]
    pub k: Option<usize>,
    /// keyword, vector or hybrid (default: the server's `search.mode`).
    #[serde(default)]
    pub mode: Option<Mode>,
}

/// `ask`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    /// The question, in natural language.
    pub question: String,
    /// The collection to answer from (default `default`).
    #[serde(default = "default_collection")]
    pub collection: String,
    /// Most retrieve-grade-reflect iterations (default: the server's `loop.max_iterations`,
    /// at most 10).
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// Time budget in milliseconds (default: the server's `loop.deadline_ms`, at most
    /// 120000).
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Also draw on the stored memories (needs a key that may write: the memories used
    /// are signalled).
    #[serde(default)]
    pub memory: bool,
    /// The memory project to recall from, with `memory`.
    #[serde(default)]
    pub project: Option<String>,
}

/// `ingest_text`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestTextArgs {
    /// The text to add.
    pub text: String,
    /// Its title.
    #[serde(default)]
    pub title: Option<String>,
    /// The source's name (default: from the text's hash). The same name again replaces
    /// that source.
    #[serde(default)]
    pub name: Option<String>,
    /// The collection to add it to (created when missing; default `default`).
    #[serde(default = "default_collection")]
    pub collection: String,
    /// Metadata kept with the document and shown with its hits.
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// `ingest_url`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestUrlArgs {
    /// The page's `http://` or `https://` URL (public addresses only, unless the server
    /// allows more).
    pub url: String,
    /// The source's name (default: from the URL's hash, so the same URL again replaces
    /// its earlier version).
    #[serde(default)]
    pub name: Option<String>,
    /// The collection to add it to (created when missing; default `default`).
    #[serde(default = "default_collection")]
    pub collection: String,
    /// Metadata kept with the document beside its URL.
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// `job_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobArgs {
    /// The job id `ingest_text` or `ingest_url` returned.
    pub job: String,
}

/// The kind of a memory.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    /// Something true about the world or the project.
    Fact,
    /// A choice that was made.
    Decision,
    /// A rule to follow.
    Rule,
    /// What someone prefers.
    Preference,
    /// How to do something.
    Procedure,
    /// Something that happened.
    Episode,
}

/// `memory_add`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryAddArgs {
    /// What to remember: one self-contained statement.
    pub text: String,
    /// Its kind (default: inferred from the text).
    #[serde(default)]
    pub kind: Option<MemoryKind>,
    /// The project it belongs to.
    #[serde(default)]
    pub project: String,
    /// The session it came from.
    #[serde(default)]
    pub session: String,
    /// The agent writing it.
    #[serde(default)]
    pub agent: String,
    /// Where it came from (a file, a URL, `user`).
    #[serde(default)]
    pub source: Option<String>,
}

/// `memory_search`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// What to recall.
    pub query: String,
    /// How many memories (default 10, at most 100).
    #[serde(default)]
    pub k: Option<usize>,
    /// Only this project.
    #[serde(default)]
    pub project: String,
    /// Only this session.
    #[serde(default)]
    pub session: String,
    /// Also memories a newer one superseded.
    #[serde(default)]
    pub include_superseded: bool,
}

/// A memory by id (`memory_get`, `memory_forget`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryIdArgs {
    /// The memory's id (16 hex digits).
    pub id: String,
}

/// A trust signal.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Signal {
    /// It was used in an answer.
    Used,
    /// A user confirmed it.
    Confirmed,
    /// It was retrieved but not used.
    Ignored,
    /// A user corrected it.
    Corrected,
}

/// `memory_signal`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySignalArgs {
    /// The memory's id.
    pub id: String,
    /// What happened to it: used, confirmed, ignored or corrected.
    pub signal: Signal,
    /// The question it answered or failed (kept for training the evaluator).
    #[serde(default)]
    pub query: Option<String>,
}

/// What a user says of an answer.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnswerVerdict {
    /// The answer was right: its cited passages answer the question.
    Good,
    /// The answer was wrong: its cited passages do not.
    Bad,
}

/// `answer_mark`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerMarkArgs {
    /// The run id an `ask` returned (`run_id`).
    pub run_id: String,
    /// good or bad.
    pub verdict: AnswerVerdict,
    /// The citations (their numbers in the answer) the mark is about; all when absent.
    #[serde(default)]
    pub citations: Option<Vec<usize>>,
    /// A note (at most 16,384 characters).
    #[serde(default)]
    pub note: Option<String>,
}

/// A relation between two memories (the memory store's names).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub enum LinkKind {
    /// The first replaces the second.
    #[serde(rename = "SUPERSEDES")]
    Supersedes,
    /// The first updates part of the second.
    #[serde(rename = "PARTIAL_UPDATE")]
    PartialUpdate,
    /// They are about the same thing.
    #[serde(rename = "RELATED_TO")]
    RelatedTo,
    /// They cannot both be true.
    #[serde(rename = "CONTRADICTS")]
    Contradicts,
    /// The first was derived from the second.
    #[serde(rename = "DERIVED_FROM")]
    DerivedFrom,
}

/// `memory_link`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryLinkArgs {
    /// The memory the link starts from.
    pub from: String,
    /// The relation.
    pub kind: LinkKind,
    /// The other memory's id.
    pub to: String,
}

/// `memory_tiers`.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TiersArgs {
    /// The project.
    #[serde(default)]
    pub project: Option<String>,
    /// The session.
    #[serde(default)]
    pub session: Option<String>,
    /// What the session is about: selects the L2 memories.
    #[serde(default)]
    pub query: Option<String>,
}

/// `memory_graph`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphArgs {
    /// An entity's name (2 to 80 characters), e.g. a person, project or library.
    pub entity: String,
}
