//! Retrieval and question-answering evaluation for neuralcore.
//!
//! This crate is a pure library: it does no store access and contains no CLI code.
//! It provides six things:
//!
//! * [`beir`]: loading of a dataset in the [BEIR](https://github.com/beir-cellar/beir)
//!   folder layout (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`). The corpus is
//!   not read here; only its path is exposed so the caller can ingest it however it likes.
//! * [`metrics`]: the usual IR metrics (nDCG@k, Recall@k, Precision@k, MRR@k, hit@k) with
//!   the same definitions as `trec_eval` / `pytrec_eval` (which BEIR uses), a per-query
//!   [`QueryMetrics`] bundle, and a [`Summary`] (means plus latency percentiles) with
//!   plain-text table rendering ([`Summary::table`], [`side_by_side`]).
//! * [`qa`]: question answering: SQuAD 2.0 and HotpotQA loaded into one model
//!   ([`QaSet`]), written as a BEIR-style corpus for ingestion ([`write_corpus_jsonl`]),
//!   and answer / abstention / citation / evidence metrics over the engine's outcomes
//!   ([`score`] → [`QaReport`], [`render_side_by_side`]), including the conflict,
//!   multi-aspect and fragment metrics, also from `--per-question` lines ([`QaLine`],
//!   [`score_lines`]).
//! * [`derive`]: SQuAD-format sets derived from SQuAD 2.0 that show reasoning failures:
//!   conflict sets ([`derive_conflicts`]) and multi-aspect sets ([`derive_aspects`]).
//! * [`locomo`]: long-conversation memory: the LoCoMo conversations loaded as dialogue
//!   [`Turn`]s and [`MemQuestion`]s with evidence turn ids ([`load_locomo`] →
//!   [`LocomoSet`]), and evidence recall of memory retrieval per question category
//!   ([`score_memory_retrieval`] → [`MemRetrievalReport`], [`render_memory_side_by_side`]).
//! * [`pairs`]: labelled (question, passage, label) [`Pair`]s for training a relevance
//!   evaluator or reranker: from SQuAD 2.0 ([`squad_pairs`]) and BEIR qrels with BM25
//!   hard negatives ([`beir_pairs`]), read from JSON lines ([`read_pairs`]) and checked
//!   ([`check_pairs`]).
//!
//! A typical evaluation loop:
//!
//! ```no_run
//! use std::path::Path;
//! use neuralcore_eval::{BeirDataset, QueryMetrics, Summary};
//!
//! let ds = BeirDataset::open(Path::new("data/scifact"), "test")?;
//! for w in &ds.warnings {
//!     eprintln!("warning: {w}");
//! }
//! // ... ingest ds.corpus_path into the engine ...
//! let mut per_query = Vec::new();
//! let mut latencies_ms = Vec::new();
//! for q in &ds.queries {
//!     let ranked: Vec<String> = Vec::new(); // doc ids from the engine, best first, deduplicated
//!     latencies_ms.push(0.0);
//!     per_query.push(QueryMetrics::compute(&ranked, &ds.qrels[&q.id]));
//! }
//! let summary = Summary::from(&per_query, &latencies_ms);
//! println!("{}", summary.table("bm25"));
//! # Ok::<(), neuralcore_eval::EvalError>(())
//! ```

#![warn(missing_docs)]

pub mod beir;
pub mod derive;
pub mod error;
mod json;
pub mod locomo;
pub mod metrics;
pub mod pairs;
pub mod qa;

pub use beir::{available_splits, BeirDataset, Qrels, Query};
pub use derive::{
    answer_type, derive_aspects, derive_conflicts, join_questions, replace_answer, AnswerType,
    DeriveOptions, DerivedSet,
};
pub use error::EvalError;
pub use locomo::{
    category_name, evidence_recall, load_locomo, render_memory_side_by_side,
    score_memory_retrieval, turn_key, CategoryStats, EvidenceStats, LocomoSet, MemQuestion,
    MemRetrievalReport, RecallStats, Turn, CATEGORY_NAMES,
};
pub use metrics::{
    hit_at_k, mrr_at_k, ndcg_at_k, percentile_nearest_rank, precision_at_k, recall_at_k,
    side_by_side, QueryMetrics, Summary,
};
pub use pairs::{beir_pairs, check_pairs, hotpot_pairs, read_pairs, squad_pairs, Pair};
pub use qa::{
    answer_contains, answer_fragments, answer_sentences, aspects_answered, citation_correct,
    conflict_outcome, load_hotpotqa, load_qa, load_qa_limited, load_qa_selected, load_squad2,
    normalize_answer, qa_file, read_qa_lines, render_side_by_side, score, score_lines,
    split_sentences, strip_citation_markers, write_corpus_jsonl, Aspect, Citation, ConflictOutcome,
    EngineAspect, QaLine, QaOutcome, QaPassage, QaQuestion, QaReport, QaSet, Support,
    KNOWN_QA_FILES,
};
