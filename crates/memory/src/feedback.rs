//! Labelled pairs from the users' own feedback, for `neuralcore train evaluator
//! --pairs` (what `neuralcore feedback export` writes).
//!
//! A trust signal sent about a question — the loop's `used` (cited by a supported
//! sentence) and `ignored` (recalled but graded out or not cited), a user's `confirmed`
//! and `corrected` — says whether the memory answered that question. Each (question,
//! memory) pair gives one labelled pair: relevant for `used` and `confirmed`, not for
//! `ignored` and `corrected`. `confirmed` and `corrected` (what a user says) outrank
//! `used` and `ignored` (what the loop saw), whoever sent them; among signals of the
//! same weight the latest wins. Signals sent without a question (older ones, or a user's
//! about the memory as a whole) say nothing about relevance to a question and give no
//! pair.

use std::collections::BTreeMap;

use neuralcore_core::pairs::Pair;

use crate::{Filter, MemResult, MemoryStore, Signal, Status};

/// What [`pairs`] found.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Feedback {
    /// One pair per (question, memory), in the order the deciding signals were sent.
    pub pairs: Vec<Pair>,
    /// Memories with at least one pair.
    pub memories: usize,
    /// Signals read that named a question.
    pub signals: usize,
    /// Signals read that named none (no pair).
    pub without_question: usize,
    /// Answers a user marked good or bad (their pairs follow the memories' ones; the
    /// application core adds them, see `neuralcore_app::marks`).
    pub marked_answers: usize,
}

/// The labelled pairs of the memories passing `filter` (archived ones too when the
/// filter asks for them; a purged memory has no text left and gives none).
pub fn pairs(store: &MemoryStore, filter: &Filter, now_ms: u64) -> MemResult<Feedback> {
    let mut out = Feedback::default();
    // (question, memory) → (weight, at, seq, pair): the deciding signal.
    let mut best: BTreeMap<(String, String), (u8, u64, usize, Pair)> = BTreeMap::new();
    let mut seq = 0usize;
    for m in store.list(filter, now_ms)? {
        if m.status == Status::Purged || m.text.trim().is_empty() {
            continue;
        }
        for e in store.audit(&m.id)? {
            let Some(signal) = Signal::parse(&e.event) else {
                continue;
            };
            let Some(q) = e.query.as_deref().map(str::trim).filter(|q| !q.is_empty()) else {
                out.without_question += 1;
                continue;
            };
            out.signals += 1;
            seq += 1;
            let (weight, label) = match signal {
                Signal::Used => (0, 1.0),
                Signal::Ignored => (0, 0.0),
                Signal::Confirmed => (1, 1.0),
                Signal::Corrected => (1, 0.0),
            };
            let pair = Pair {
                question: q.to_string(),
                passage: m.text.clone(),
                label,
                source: format!("feedback:memory:{}:{}", m.id, signal.as_str()),
            };
            let key = (q.to_lowercase(), m.id.clone());
            let wins = best
                .get(&key)
                .is_none_or(|(w, at, s, _)| (weight, e.at_ms, seq) > (*w, *at, *s));
            if wins {
                best.insert(key, (weight, e.at_ms, seq, pair));
            }
        }
    }
    out.memories = best
        .keys()
        .map(|(_, id)| id)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let mut chosen: Vec<_> = best.into_values().collect();
    chosen.sort_by_key(|a| (a.1, a.2));
    out.pairs = chosen.into_iter().map(|(_, _, _, p)| p).collect();
    Ok(out)
}
