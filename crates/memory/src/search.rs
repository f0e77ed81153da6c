//! Searching memories: BM25 over their texts and cosine over their embeddings, fused,
//! weighted by trust, then the relation rules:
//!
//! - a memory SUPERSEDED by an active one is hidden (even when it matches better); when
//!   asked to include it, it is never ranked above its successor;
//! - PARTIAL_UPDATE returns both, the newer first;
//! - CONTRADICTS marks both sides; the lower-trust side is flagged, never dropped.
//!
//! The index lives in memory, built from the store on first use and kept in step by
//! [`MemorySearcher::add`] and [`MemorySearcher::refresh`]; a few thousand memories
//! index in milliseconds.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};

use neuralcore_core::analysis::{Analyzer, AnalyzerConfig, Stopwords};
use neuralcore_core::bm25::{self, Bm25Params};
use neuralcore_core::{Embedder, TextKind};
use serde::Serialize;

use crate::error::{MemResult, MemoryError};
use crate::rerank::{Candidate, Features, MemoryRanker};
use crate::store::{MemoryStore, NewMemory};
use crate::trust;
use crate::types::{Filter, Memory, RelKind, Status};

/// How to search.
#[derive(Debug, Clone)]
pub struct MemorySearchOptions {
    /// Results wanted.
    pub k: usize,
    /// Which memories (default: active ones).
    pub filter: Filter,
    /// Show superseded memories too (never above their successors).
    pub include_superseded: bool,
    /// Weight of the vector score against BM25 (0 = keyword only, 1 = vector only).
    pub alpha: f32,
    /// How much trust scales relevance: `relevance × (1 − w + w × trust)`.
    pub trust_weight: f32,
    /// When the query names some of the speakers of the memories (their `speaker`
    /// metadata) but not all, memories said by someone else score `× (1 − w)`: what a
    /// question asks about a person is mostly what that person said.
    pub speaker_weight: f32,
    /// The second stage: a model over features of the top `rerank_depth` fused
    /// candidates (see [`crate::rerank`]); `None` keeps the fused order.
    pub rerank: Option<MemoryRanker>,
    /// The model for searches without a query vector (no embedder, or `alpha = 0`),
    /// whose features differ: the fused score is BM25 alone and the cosine is 0.
    pub rerank_keyword: Option<MemoryRanker>,
    /// How many fused candidates the reranker sees.
    pub rerank_depth: usize,
    /// The query's embedding when the caller already has it (the loop embeds a question
    /// once, through the engine's cache, for documents and memories alike); `None`: the
    /// searcher embeds the query with its own model. Used only when `alpha > 0`.
    pub query_vector: Option<Vec<f32>>,
}

impl Default for MemorySearchOptions {
    fn default() -> Self {
        MemorySearchOptions {
            k: 10,
            filter: Filter::default(),
            include_superseded: false,
            alpha: 0.5,
            trust_weight: 0.3,
            speaker_weight: 0.3,
            rerank: Some(MemoryRanker::BUILT_IN),
            rerank_keyword: Some(MemoryRanker::BUILT_IN_KEYWORD),
            rerank_depth: 50,
            query_vector: None,
        }
    }
}

/// One result.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct MemHit {
    /// The memory (trust as of the search).
    pub memory: Memory,
    /// Final score.
    pub score: f32,
    /// Relevance before trust: with the reranker, its probability over the best
    /// candidate's (the best is 1; candidates beyond `rerank_depth` follow, scaled
    /// below); without, the fused score.
    pub relevance: f32,
    /// Why it is marked: `superseded by <id>`, `partial update of <id>`,
    /// `contradicts <id> (lower trust: flagged)`.
    pub flags: Vec<String>,
}

/// The in-memory index.
#[derive(Default)]
struct Index {
    memories: Vec<Memory>,
    /// Per memory, its speaker's position in `speakers`.
    speaker: Vec<Option<u32>>,
    /// The speakers' names, lower case, split into words.
    speakers: Vec<Vec<String>>,
    /// Positions of each project's memories.
    by_project: HashMap<String, Vec<usize>>,
    /// Per memory, its session's number in `sessions` (none without a session).
    session: Vec<Option<u32>>,
    /// (tenant, project, session) of each session number.
    sessions: HashMap<(String, String, String), u32>,
    /// Per memory, the memories just before and after it in its session (in order of
    /// creation).
    prev: Vec<Option<usize>>,
    next: Vec<Option<usize>>,
    /// The newest memory of each session, where the next one is linked.
    tail: HashMap<u32, usize>,
    lens: Vec<f32>,
    postings: HashMap<String, Vec<(u32, f32)>>,
    total_len: f64,
    built: bool,
}

/// Search over a [`MemoryStore`].
pub struct MemorySearcher {
    store: Arc<MemoryStore>,
    embedder: Option<Arc<dyn Embedder>>,
    index: RwLock<Index>,
}

/// Stop words of the memory index: Lucene's English list (the documents' default)
/// without `no` and `not`, plus question words, `do` and pronouns. Memories are
/// conversation turns and the queries questions about them, where those words match
/// everything: with Lucene's list alone, LoCoMo recall@10 on conversations 3–5 fell
/// from 0.805 to 0.793 (BM25 alone 0.708 to 0.693).
const MEMORY_STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this",
    "to", "was", "will", "with", "what", "which", "who", "when", "where", "how", "did", "do",
    "does", "i", "you", "me", "my", "your", "we", "our", "he", "she", "his", "her",
];

/// The analyzer of memories and memory queries: the project's one analyzer
/// ([`neuralcore_core::analysis`]: the same tokens, lower-casing and English stems as
/// a document collection with the default `[analyzer]`) with [`MEMORY_STOP_WORDS`].
fn analyzer() -> &'static Analyzer {
    static ANALYZER: OnceLock<Analyzer> = OnceLock::new();
    ANALYZER.get_or_init(|| {
        Analyzer::new(&AnalyzerConfig {
            stopwords: Stopwords::List(MEMORY_STOP_WORDS.iter().map(|w| w.to_string()).collect()),
            ..AnalyzerConfig::default()
        })
        .expect("the default language is known")
    })
}

/// Analyzed terms of a text (see [`analyzer`]).
pub fn terms(text: &str) -> Vec<String> {
    analyzer().terms(text)
}

/// What is indexed of a memory: its text, with the speaker and date when known, and
/// the `context` (the turn it answers) and `followup` (the reply to it) metadata.
pub fn indexed_text(m: &Memory) -> String {
    text_with_context(&m.text, &m.metadata, m.occurred_at.as_deref())
}

/// [`indexed_text`] from a memory's parts (also for one not stored yet).
fn text_with_context(
    text: &str,
    metadata: &std::collections::BTreeMap<String, serde_json::Value>,
    occurred_at: Option<&str>,
) -> String {
    let meta = |k: &str| metadata.get(k).and_then(|v| v.as_str());
    let mut t = String::new();
    if let Some(s) = meta("speaker") {
        t.push_str(s);
        t.push_str(": ");
    }
    t.push_str(text);
    for (key, label) in [("context", "in reply to"), ("followup", "answered by")] {
        if let Some(c) = meta(key) {
            t.push_str(&format!(" [{label}: {c}]"));
        }
    }
    if let Some(d) = occurred_at {
        t.push_str(&format!(" ({d})"));
    }
    t
}

impl Index {
    fn push(&mut self, m: Memory) {
        let i = self.memories.len();
        let ts = terms(&indexed_text(&m));
        let mut tf: HashMap<&str, f32> = HashMap::new();
        for t in &ts {
            *tf.entry(t.as_str()).or_default() += 1.0;
        }
        for (t, f) in tf {
            self.postings
                .entry(t.to_string())
                .or_default()
                .push((i as u32, f));
        }
        self.lens.push(ts.len() as f32);
        self.total_len += ts.len() as f64;
        let speaker = m
            .metadata
            .get("speaker")
            .and_then(|v| v.as_str())
            .map(|name| {
                let words = words(name);
                match self.speakers.iter().position(|s| *s == words) {
                    Some(p) => p as u32,
                    None => {
                        self.speakers.push(words);
                        (self.speakers.len() - 1) as u32
                    }
                }
            });
        self.speaker.push(speaker);
        self.by_project
            .entry(m.scope.project.clone())
            .or_default()
            .push(i);
        let session = (!m.scope.session.is_empty()).then(|| {
            let n = self.sessions.len() as u32;
            *self
                .sessions
                .entry((
                    m.scope.tenant.clone(),
                    m.scope.project.clone(),
                    m.scope.session.clone(),
                ))
                .or_insert(n)
        });
        self.session.push(session);
        self.prev.push(None);
        self.next.push(None);
        // Once built, a new memory is linked as its session's newest (in order of
        // arrival; the next `refresh` orders by creation time); while building, the
        // order is set by `link_sessions` at the end.
        if let (true, Some(s)) = (self.built, session) {
            if let Some(&last) = self.tail.get(&s) {
                self.next[last] = Some(i);
                self.prev[i] = Some(last);
            }
            self.tail.insert(s, i);
        }
        self.memories.push(m);
    }

    /// Link the memories of each session in order of creation (ties in index order).
    fn link_sessions(&mut self) {
        let mut groups: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, s) in self.session.iter().enumerate() {
            if let Some(s) = s {
                groups.entry(*s).or_default().push(i);
            }
        }
        for (s, mut members) in groups {
            members.sort_by_key(|&i| (self.memories[i].created_at_ms, i));
            for w in members.windows(2) {
                self.next[w[0]] = Some(w[1]);
                self.prev[w[1]] = Some(w[0]);
            }
            if let Some(&last) = members.last() {
                self.tail.insert(s, last);
            }
        }
    }

    /// The speakers the query names (every word of the name, or its first word, as
    /// words of the query).
    fn named_speakers(&self, query: &str) -> HashSet<u32> {
        let q: HashSet<String> = words(query).into_iter().collect();
        (0..self.speakers.len() as u32)
            .filter(|&i| {
                let name = &self.speakers[i as usize];
                !name.is_empty() && (name.iter().all(|w| q.contains(w)) || q.contains(&name[0]))
            })
            .collect()
    }

    /// BM25 of every memory with a query term: the keyword index's formula and default
    /// parameters ([`neuralcore_core::bm25`], [`Bm25Params::default`]), a query term
    /// counted as often as it occurs.
    fn bm25(&self, query: &str) -> HashMap<usize, f32> {
        let params = Bm25Params::default();
        let n = self.memories.len() as f32;
        let avg = bm25::average_length(self.total_len, self.memories.len() as u64);
        // Query terms with their counts, in order of first occurrence (a fixed order of
        // summation, so equal queries score bit for bit the same).
        let mut qterms: Vec<(String, f32)> = Vec::new();
        for t in terms(query) {
            match qterms.iter_mut().find(|(q, _)| *q == t) {
                Some(e) => e.1 += 1.0,
                None => qterms.push((t, 1.0)),
            }
        }
        let mut out: HashMap<usize, f32> = HashMap::new();
        for (t, qtf) in qterms {
            let Some(p) = self.postings.get(&t) else {
                continue;
            };
            let idf = bm25::idf(n, p.len() as f32);
            for &(i, tf) in p {
                let dl = self.lens[i as usize];
                *out.entry(i as usize).or_default() += params.score(idf, qtf, tf, dl, avg);
            }
        }
        out
    }

    /// The first stage: BM25 (scaled by its best) and cosine fused, filtered by scope
    /// and kind, with the speaker rule applied.
    fn fused(&self, query: &str, qv: Option<&[f32]>, opts: &MemorySearchOptions) -> Fused {
        // Status, scope and kind come from the store (fresh); the index may lag.
        let mut keyword = self.bm25(query);
        by_max(&mut keyword);
        let f = &opts.filter;
        let mut vs: Vec<(usize, f32)> = Vec::new();
        if let Some(q) = qv {
            // Only the project's memories when the filter names one.
            let all: Vec<usize>;
            let pool: &[usize] = if f.project.is_empty() {
                all = (0..self.memories.len()).collect();
                &all
            } else {
                self.by_project.get(&f.project).map_or(&[], Vec::as_slice)
            };
            for &i in pool {
                let m = &self.memories[i];
                if f.in_scope(m) {
                    if let Some(s) = self.cosine(i, q) {
                        vs.push((i, s));
                    }
                }
            }
            // Keep the vector candidates that matter: the top of the cosine list.
            if vs.len() > 200 {
                vs.select_nth_unstable_by(199, |a, b| b.1.total_cmp(&a.1));
                vs.truncate(200);
            }
        }
        let alpha = if qv.is_some() { opts.alpha } else { 0.0 };
        let mut scores: HashMap<usize, f32> = HashMap::new();
        for (&i, &s) in &keyword {
            *scores.entry(i).or_default() += (1.0 - alpha) * s;
        }
        // Cosine is already on a fixed scale.
        for (i, s) in vs {
            *scores.entry(i).or_default() += alpha * s.max(0.0);
        }
        // Scope and kind never change: filter before cutting the list (status is
        // checked on the fresh record).
        scores.retain(|&i, _| {
            let m = &self.memories[i];
            f.in_scope(m) && (f.kinds.is_empty() || f.kinds.contains(&m.kind))
        });
        // A question about one person: what the others said counts less.
        let named = self.named_speakers(query);
        let sw = opts.speaker_weight.clamp(0.0, 1.0);
        if !named.is_empty() && sw > 0.0 {
            let present: HashSet<u32> = scores.keys().filter_map(|&i| self.speaker[i]).collect();
            if present.iter().any(|s| !named.contains(s)) {
                for (&i, s) in scores.iter_mut() {
                    if self.speaker[i].is_some_and(|p| !named.contains(&p)) {
                        *s *= 1.0 - sw;
                    }
                }
            }
        }
        let mut ranked: Vec<(usize, f32)> = scores.iter().map(|(&i, &s)| (i, s)).collect();
        // Ties in index order, so equal scores rank the same way every time.
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Fused {
            ranked,
            scores,
            keyword,
            named,
        }
    }

    /// Cosine of memory `i` with the query vector (its embedding is normalised).
    fn cosine(&self, i: usize, q: &[f32]) -> Option<f32> {
        let v = self.memories[i].embedding.as_ref()?;
        // A NaN (a broken vector) would sort first: such a memory has no cosine.
        (v.len() == q.len())
            .then(|| neuralcore_core::dot(v, q))
            .filter(|c| c.is_finite())
    }

    /// The reranker's features of the top `depth` fused candidates, in fused order.
    fn features(&self, fused: &Fused, qv: Option<&[f32]>, depth: usize) -> Vec<(usize, Features)> {
        // Best fused score of each session.
        let mut session_best: HashMap<u32, f32> = HashMap::new();
        for (&i, &s) in &fused.scores {
            if let Some(g) = self.session[i] {
                let b = session_best.entry(g).or_default();
                *b = b.max(s);
            }
        }
        let score = |j: Option<usize>| j.and_then(|j| fused.scores.get(&j).copied());
        fused
            .ranked
            .iter()
            .take(depth)
            .enumerate()
            .map(|(rank, &(i, s))| {
                let named = !fused.named.is_empty();
                let c = Candidate {
                    fused: s,
                    keyword: fused.keyword.get(&i).copied().unwrap_or(0.0),
                    cosine: qv.and_then(|q| self.cosine(i, q)).unwrap_or(0.0),
                    neighbour: score(self.prev[i])
                        .into_iter()
                        .chain(score(self.next[i]))
                        .fold(0.0, f32::max),
                    session: self.session[i].map_or(s, |g| session_best[&g]),
                    rank,
                    speaker_named: named
                        && self.speaker[i].is_some_and(|p| fused.named.contains(&p)),
                    speaker_other: named
                        && self.speaker[i].is_some_and(|p| !fused.named.contains(&p)),
                };
                (i, c.features(&self.memories[i].text))
            })
            .collect()
    }

    /// The fused ranking with its top `depth` reordered by `model`: those score the
    /// model's probability over the best one's; the rest follow, scaled below the
    /// lowest of them.
    fn rerank(
        &self,
        fused: &Fused,
        qv: Option<&[f32]>,
        model: &MemoryRanker,
        depth: usize,
    ) -> Vec<(usize, f32)> {
        let mut top: Vec<(usize, f32)> = self
            .features(fused, qv, depth)
            .into_iter()
            .map(|(i, x)| (i, model.score(&x)))
            .collect();
        // Stable here; the relation rules then order equal scores by id.
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        // Relative to the best: the probabilities carry the base rate of the data the
        // model was fitted on (one evidence turn in fifty), which means nothing to a
        // reader of the scores.
        let best = top.first().map_or(0.0, |t| t.1);
        if best > 0.0 {
            for t in &mut top {
                t.1 /= best;
            }
        }
        let floor = top.last().map_or(0.0, |t| t.1);
        let rest = &fused.ranked[top.len().min(fused.ranked.len())..];
        let first_rest = rest.first().map_or(0.0, |r| r.1);
        top.extend(rest.iter().map(|&(i, s)| {
            let below = if first_rest > 0.0 {
                s / first_rest
            } else {
                0.0
            };
            (i, floor * 0.5 * below)
        }));
        top
    }
}

/// The fused ranking and what the reranker reads of it.
struct Fused {
    /// Candidates by fused score, best first (ties in index order).
    ranked: Vec<(usize, f32)>,
    /// The same scores by position.
    scores: HashMap<usize, f32>,
    /// BM25 scaled by its best, of every memory a query term matches.
    keyword: HashMap<usize, f32>,
    /// The speakers the query names.
    named: HashSet<u32>,
}

/// Lower-case words (split on anything not alphanumeric).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Scale by the best score (BM25 has no fixed range; a handful of candidates makes
/// min-max scaling meaningless).
fn by_max(v: &mut HashMap<usize, f32>) {
    let hi = v.values().fold(0f32, |a, x| a.max(*x));
    for x in v.values_mut() {
        *x = if hi > 0.0 { *x / hi } else { 0.0 };
    }
}

impl MemorySearcher {
    /// A searcher over `store`, embedding with `embedder` when given.
    pub fn new(store: Arc<MemoryStore>, embedder: Option<Arc<dyn Embedder>>) -> Self {
        MemorySearcher {
            store,
            embedder,
            index: RwLock::new(Index::default()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<MemoryStore> {
        &self.store
    }

    /// The embedder, if any.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Remember something, embedding it first (when there is a model), and index it.
    pub fn add(&self, mut new: NewMemory, by: &str, now_ms: u64) -> MemResult<Memory> {
        self.add_many(std::slice::from_mut(&mut new), by, now_ms)
            .map(|mut v| v.remove(0))
    }

    /// Remember many (embedded in batches), in order: the `i`-th is created at
    /// `now_ms + i`, so a batch of conversation turns keeps their order in its session.
    pub fn add_many(
        &self,
        news: &mut [NewMemory],
        by: &str,
        now_ms: u64,
    ) -> MemResult<Vec<Memory>> {
        if let Some(e) = &self.embedder {
            let todo: Vec<usize> = (0..news.len())
                .filter(|&i| news[i].embedding.is_none())
                .collect();
            for group in todo.chunks(64) {
                let texts: Vec<String> = group
                    .iter()
                    .map(|&i| {
                        let n = &news[i];
                        text_with_context(&n.text, &n.metadata, n.occurred_at.as_deref())
                    })
                    .collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let vecs = e
                    .embed(&refs, TextKind::Document)
                    .map_err(|err| MemoryError::Backend(format!("embedding: {err}")))?;
                for (&i, v) in group.iter().zip(vecs) {
                    news[i].embedding = Some(v);
                }
            }
        }
        let mut out = Vec::with_capacity(news.len());
        for (i, n) in news.iter().enumerate() {
            let m = self.store.add(n.clone(), by, now_ms + i as u64)?;
            let mut idx = self.index.write().expect("memory index lock");
            if idx.built {
                idx.push(m.clone());
            }
            out.push(m);
        }
        Ok(out)
    }

    /// Rebuild the index from the store (after changes made elsewhere).
    pub fn refresh(&self) -> MemResult<()> {
        let all = self.store.backend().list(&Filter {
            statuses: vec![Status::Active, Status::Archived],
            ..Default::default()
        })?;
        let mut idx = Index::default();
        for m in all {
            idx.push(m);
        }
        idx.link_sessions();
        idx.built = true;
        *self.index.write().expect("memory index lock") = idx;
        Ok(())
    }

    fn ensure(&self) -> MemResult<()> {
        if !self.index.read().expect("memory index lock").built {
            self.refresh()?;
        }
        Ok(())
    }

    /// Memories superseded by an active memory (hidden from search and loading).
    pub fn superseded(&self) -> MemResult<HashSet<String>> {
        let mut out = HashSet::new();
        for r in self
            .store
            .backend()
            .relations_of_kind(RelKind::Supersedes)?
        {
            if self
                .store
                .backend()
                .get(&r.from)?
                .is_some_and(|m| m.status == Status::Active)
            {
                out.insert(r.to);
            }
        }
        Ok(out)
    }

    /// The query's embedding (when the search uses vectors), after checking the query
    /// and building the index.
    fn prepare(&self, query: &str, opts: &MemorySearchOptions) -> MemResult<Option<Vec<f32>>> {
        if query.trim().is_empty() {
            return Err(MemoryError::Invalid("the query is empty".into()));
        }
        self.ensure()?;
        if opts.alpha <= 0.0 {
            return Ok(None);
        }
        if let Some(v) = &opts.query_vector {
            return Ok(Some(v.clone()));
        }
        Ok(match &self.embedder {
            Some(e) => Some(
                e.embed_query(query)
                    .map_err(|err| MemoryError::Backend(format!("embedding: {err}")))?,
            ),
            _ => None,
        })
    }

    /// The features the reranker sees for the top `opts.rerank_depth` fused candidates,
    /// in fused order (what `eval locomo --fit` learns from).
    pub fn rerank_features(
        &self,
        query: &str,
        opts: &MemorySearchOptions,
    ) -> MemResult<Vec<(Memory, Features)>> {
        let qv = self.prepare(query, opts)?;
        let idx = self.index.read().expect("memory index lock");
        let fused = idx.fused(query, qv.as_deref(), opts);
        Ok(idx
            .features(&fused, qv.as_deref(), opts.rerank_depth)
            .into_iter()
            .map(|(i, x)| (idx.memories[i].clone(), x))
            .collect())
    }

    /// The best memories for `query` under `opts`, with the relation rules applied.
    pub fn search(
        &self,
        query: &str,
        opts: &MemorySearchOptions,
        now_ms: u64,
    ) -> MemResult<Vec<MemHit>> {
        let qv = self.prepare(query, opts)?;
        let idx = self.index.read().expect("memory index lock");
        let fused = idx.fused(query, qv.as_deref(), opts);
        let model = if qv.is_some() {
            opts.rerank
        } else {
            opts.rerank_keyword
        };
        let mut scored = match model {
            Some(model) if opts.rerank_depth > 0 => {
                idx.rerank(&fused, qv.as_deref(), &model, opts.rerank_depth)
            }
            _ => fused.ranked,
        };
        scored.truncate((opts.k * 10).max(100));
        let mut hits: Vec<MemHit> = Vec::new();
        // Status and trust of the hits, for the relation rules.
        let mut fresh: HashMap<String, (Status, f64)> = HashMap::new();
        // One read for every candidate, without the vectors (the index has them).
        let ids: Vec<&str> = scored
            .iter()
            .map(|&(i, _)| idx.memories[i].id.as_str())
            .collect();
        let records = self.store.backend().get_many(&ids, false)?;
        for ((i, rel), m) in scored.into_iter().zip(records) {
            let Some(mut m) = m else {
                continue;
            };
            if !opts.filter.matches(&m) {
                continue;
            }
            // A purged memory's vector is erased in the store, not yet in the index.
            if m.status != Status::Purged {
                m.embedding = idx.memories[i].embedding.clone();
            }
            m.trust = trust::effective(&m, now_ms, self.store.config());
            if m.trust < self.store.config().archive_below && m.status == Status::Active {
                continue; // would be archived by the next sweep
            }
            let w = opts.trust_weight.clamp(0.0, 1.0);
            let score = rel * (1.0 - w + w * m.trust as f32);
            fresh.insert(m.id.clone(), (m.status, m.trust));
            hits.push(MemHit {
                memory: m,
                score,
                relevance: rel,
                flags: Vec::new(),
            });
        }
        drop(idx);
        self.apply_relations(&mut hits, &fresh, opts, now_ms)?;
        hits.truncate(opts.k);
        Ok(hits)
    }

    fn apply_relations(
        &self,
        hits: &mut Vec<MemHit>,
        fresh: &HashMap<String, (Status, f64)>,
        opts: &MemorySearchOptions,
        now_ms: u64,
    ) -> MemResult<()> {
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.memory.id.cmp(&b.memory.id))
        });
        let ids: Vec<String> = hits.iter().map(|h| h.memory.id.clone()).collect();
        let mut superseded_by: HashMap<String, String> = HashMap::new();
        let mut partial_of: HashMap<String, String> = HashMap::new();
        let mut contradicts: Vec<(String, String)> = Vec::new();
        let nodes: Vec<&str> = ids.iter().map(String::as_str).collect();
        for (id, rels) in ids.iter().zip(self.store.backend().relations_many(&nodes)?) {
            for r in rels {
                match r.kind {
                    RelKind::Supersedes if &r.to == id => {
                        // Only an active successor hides it.
                        let status = match fresh.get(&r.from) {
                            Some(&(status, _)) => Some(status),
                            None => self.store.backend().get(&r.from)?.map(|m| m.status),
                        };
                        if status == Some(Status::Active) {
                            superseded_by.insert(id.clone(), r.from.clone());
                        }
                    }
                    RelKind::PartialUpdate if &r.from == id => {
                        partial_of.insert(id.clone(), r.to.clone());
                    }
                    RelKind::Contradicts => {
                        let pair = (r.from.clone(), r.to.clone());
                        if !contradicts.contains(&pair) {
                            contradicts.push(pair);
                        }
                    }
                    _ => {}
                }
            }
        }
        // Superseded: hidden, or kept just below its successor.
        if opts.include_superseded {
            for (old, new) in &superseded_by {
                let new_score = hits.iter().find(|h| &h.memory.id == new).map(|h| h.score);
                if let Some(h) = hits.iter_mut().find(|h| &h.memory.id == old) {
                    h.flags.push(format!("superseded by {new}"));
                    match new_score {
                        // Just below: reranked scores can be tiny, a fixed step is not.
                        Some(s) if h.score >= s => h.score = s.next_down(),
                        None => h.score = 0.0, // its successor did not match: last
                        _ => {}
                    }
                }
            }
        } else {
            hits.retain(|h| !superseded_by.contains_key(&h.memory.id));
        }
        // Partial updates: both, the newer first.
        for (newer, older) in &partial_of {
            let (Some(a), Some(b)) = (
                hits.iter().position(|h| &h.memory.id == newer),
                hits.iter().position(|h| &h.memory.id == older),
            ) else {
                if let Some(h) = hits.iter_mut().find(|h| &h.memory.id == newer) {
                    h.flags.push(format!("partial update of {older}"));
                }
                continue;
            };
            hits[a].flags.push(format!("partial update of {older}"));
            hits[b].flags.push(format!("partially updated by {newer}"));
            if hits[b].score >= hits[a].score {
                hits[a].score = hits[b].score.next_up();
            }
        }
        // Contradictions: both marked, the lower-trust side flagged.
        for (x, y) in &contradicts {
            let trust_of = |id: &str| -> MemResult<Option<f64>> {
                Ok(match fresh.get(id) {
                    Some(&(_, trust)) => Some(trust),
                    None => self
                        .store
                        .backend()
                        .get(id)?
                        .map(|m| trust::effective(&m, now_ms, self.store.config())),
                })
            };
            let (tx, ty) = (trust_of(x)?, trust_of(y)?);
            for (me, other, mine, theirs) in [(x, y, tx, ty), (y, x, ty, tx)] {
                if let Some(h) = hits.iter_mut().find(|h| &h.memory.id == me) {
                    let lower = matches!((mine, theirs), (Some(a), Some(b)) if a < b);
                    h.flags.push(if lower {
                        format!("contradicts {other} (lower trust: flagged)")
                    } else {
                        format!("contradicts {other}")
                    });
                }
            }
        }
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.memory.id.cmp(&b.memory.id))
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InMemoryBackend, TrustConfig};

    /// A searcher over an empty in-memory store, without a model.
    fn searcher() -> MemorySearcher {
        let store = MemoryStore::new(Arc::new(InMemoryBackend::new()), TrustConfig::default());
        MemorySearcher::new(Arc::new(store.unwrap()), None)
    }

    fn said(s: &MemorySearcher, speaker: Option<&str>, text: &str) -> String {
        let mut metadata = std::collections::BTreeMap::new();
        if let Some(p) = speaker {
            metadata.insert("speaker".to_string(), serde_json::json!(p));
        }
        let new = NewMemory {
            text: text.into(),
            metadata,
            ..Default::default()
        };
        s.add(new, "test", 0).unwrap().id
    }

    fn ranked(s: &MemorySearcher, query: &str, speaker_weight: f32) -> Vec<String> {
        let opts = MemorySearchOptions {
            speaker_weight,
            alpha: 0.0,
            rerank: None,
            rerank_keyword: None,
            ..Default::default()
        };
        let hits = s.search(query, &opts, 0).unwrap();
        hits.into_iter().map(|h| h.memory.id).collect()
    }

    /// Memory terms are the shared analyzer's (tokens, lower-casing, stems), with the
    /// memory stop words instead of Lucene's.
    #[test]
    fn terms_are_the_shared_analyzer_with_the_memory_stop_words() {
        let english = Analyzer::english();
        let plain = "Caroline's RUNNING club met twice; universities, 3.14 x-ray";
        assert_eq!(terms(plain), english.terms(plain));
        assert_eq!(terms("When did she go?"), vec!["go"]);
        assert_eq!(
            english.terms("When did she go?"),
            vec!["when", "did", "she", "go"]
        );
        assert_eq!(terms("not the cat"), vec!["not", "cat"]);
        assert_eq!(english.terms("not the cat"), vec!["cat"]);
    }

    /// Memory BM25 is the shared formula with the default parameters, a repeated query
    /// term counting twice.
    #[test]
    fn bm25_is_the_shared_formula_with_default_parameters() {
        let s = searcher();
        let texts = [
            "tides follow the moon",
            "the moon and the moon again, tides",
            "bread rises",
        ];
        let ids: Vec<String> = texts.iter().map(|t| said(&s, None, t)).collect();
        s.ensure().unwrap();
        let idx = s.index.read().unwrap();
        let pos = |id: &str| idx.memories.iter().position(|m| m.id == id).unwrap();
        let got = idx.bm25("moon tides moon");
        let p = Bm25Params::default();
        let lens: Vec<f32> = texts.iter().map(|t| terms(t).len() as f32).collect();
        let avg = lens.iter().sum::<f32>() / 3.0;
        // "moon" and "tides" are each in two of the three memories.
        let idf = bm25::idf(3.0, 2.0);
        let want = |i: usize, tf_moon: f32, tf_tides: f32| {
            p.score(idf, 2.0, tf_moon, lens[i], avg) + p.score(idf, 1.0, tf_tides, lens[i], avg)
        };
        for (i, (m, t)) in [(1.0, 1.0), (2.0, 1.0)].into_iter().enumerate() {
            let g = got[&pos(&ids[i])];
            assert!(
                (g - want(i, m, t)).abs() < 1e-5,
                "{i}: {g} vs {}",
                want(i, m, t)
            );
        }
        assert!(!got.contains_key(&pos(&ids[2])));
    }

    #[test]
    fn a_question_about_one_speaker_prefers_what_they_said() {
        let s = searcher();
        // Melanie's turn matches the question's words better (it names Caroline and
        // repeats "research").
        let mel = said(
            &s,
            Some("Melanie"),
            "Caroline, your research? research what?",
        );
        let car = said(&s, Some("Caroline"), "I did research on adoption agencies");
        let none = said(&s, None, "research notes, no speaker");
        // Without the rule the better keyword match wins.
        assert_eq!(ranked(&s, "What did Caroline research?", 0.0)[0], mel);
        // With it, what Caroline said comes first; a memory without a speaker keeps its
        // score (it is not discounted).
        let r = ranked(&s, "What did Caroline's research find?", 0.9);
        assert_eq!(r[0], car);
        assert!(r.iter().position(|x| x == &none) < r.iter().position(|x| x == &mel));
        // Naming both speakers (or none) changes nothing.
        assert_eq!(
            ranked(&s, "What did Caroline and Melanie research?", 0.9),
            ranked(&s, "What did Caroline and Melanie research?", 0.0)
        );
        assert_eq!(
            ranked(&s, "what research", 0.9),
            ranked(&s, "what research", 0.0)
        );
    }

    fn turn(session: &str, text: &str) -> NewMemory {
        NewMemory {
            text: text.into(),
            scope: crate::MemScope {
                project: "p".into(),
                session: session.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The reranker reads a memory's neighbours in its session (in order of creation,
    /// also for memories added after the index was built) and the session's best match;
    /// with the built-in model, a turn whose neighbours match too ranks above the same
    /// words said alone.
    #[test]
    fn the_reranker_reads_neighbours_in_the_session() {
        let s = searcher();
        let mut batch = vec![
            turn("a", "we planted a garden"),
            turn("a", "the roses are red"),
            turn("a", "garden chores all day"),
            turn("b", "unrelated chatter"),
            turn("b", "the roses are red"),
            turn("b", "more unrelated chatter"),
        ];
        let m = s.add_many(&mut batch, "test", 1_000).unwrap();
        s.refresh().unwrap();
        // Added once the index is built: the newest of session a.
        let late = s.add(turn("a", "roses everywhere"), "test", 2_000).unwrap();
        let opts = MemorySearchOptions {
            alpha: 0.0,
            speaker_weight: 0.0,
            ..Default::default()
        };
        let feats: HashMap<String, Features> = s
            .rerank_features("garden roses", &opts)
            .unwrap()
            .into_iter()
            .map(|(m, x)| (m.id, x))
            .collect();
        let fused = |id: &str| feats[id][0];
        let (neighbour, session) = (3, 4);
        // "the roses are red" in a: its neighbours both match.
        assert_eq!(
            feats[&m[1].id][neighbour],
            fused(&m[0].id).max(fused(&m[2].id))
        );
        // The late memory follows "garden chores all day".
        assert_eq!(feats[&late.id][neighbour], fused(&m[2].id));
        // The same words in b: nothing around them matches.
        assert_eq!(feats[&m[4].id][neighbour], 0.0);
        assert_eq!(feats[&m[4].id][session], fused(&m[4].id));
        let best_a = [&m[0].id, &m[1].id, &m[2].id, &late.id]
            .iter()
            .map(|id| fused(id))
            .fold(0.0, f32::max);
        assert_eq!(feats[&m[1].id][session], best_a);
        assert_eq!(fused(&m[1].id), fused(&m[4].id));
        let hits = s.search("garden roses", &opts, 3_000).unwrap();
        let rel = |id: &str| hits.iter().find(|h| h.memory.id == id).unwrap().relevance;
        // Equal fused scores; the reranker separates them (not a tie broken by id).
        assert!(rel(&m[1].id) > rel(&m[4].id) + 0.01, "{hits:?}");
        let at = |id: &str| hits.iter().position(|h| h.memory.id == id).unwrap();
        assert!(at(&m[1].id) < at(&m[4].id));
        // Without a query vector the keyword model is used; with reranking off, the
        // relevance is the fused score and the two are tied.
        let off = MemorySearchOptions {
            rerank: None,
            rerank_keyword: None,
            ..opts.clone()
        };
        let plain = s.search("garden roses", &off, 3_000).unwrap();
        let rel = |id: &str| plain.iter().find(|h| h.memory.id == id).unwrap().relevance;
        assert_eq!(rel(&m[1].id), rel(&m[4].id));
    }

    /// A query vector the caller passes is used as is, also by a searcher without a
    /// model (the loop embeds a question once for documents and memories).
    #[test]
    fn a_given_query_vector_is_used() {
        let s = searcher();
        let with = |text: &str, v: Vec<f32>| NewMemory {
            text: text.into(),
            embedding: Some(v),
            ..Default::default()
        };
        let a = s.add(with("alpha notes", vec![1.0, 0.0]), "t", 0).unwrap();
        let b = s.add(with("beta notes", vec![0.0, 1.0]), "t", 0).unwrap();
        let top = |v: Option<Vec<f32>>| {
            let opts = MemorySearchOptions {
                query_vector: v,
                rerank: None,
                rerank_keyword: None,
                ..Default::default()
            };
            s.search("notes", &opts, 0).unwrap()[0].memory.id.clone()
        };
        assert_eq!(top(Some(vec![0.0, 1.0])), b.id);
        assert_eq!(top(Some(vec![1.0, 0.0])), a.id);
    }

    /// Without a query vector the hybrid weights would read BM25 as the fused score and
    /// invert it: the keyword model keeps a better keyword match first.
    #[test]
    fn keyword_only_search_uses_the_keyword_model() {
        let s = searcher();
        let mut batch = vec![
            turn("a", "small talk"),
            turn("a", "the deploy needs two approvals from the release team"),
            turn("a", "more small talk"),
            turn("b", "small talk"),
            turn("b", "a deploy happened"),
            turn("b", "more small talk"),
        ];
        let m = s.add_many(&mut batch, "test", 1_000).unwrap();
        let opts = MemorySearchOptions {
            alpha: 0.0,
            ..Default::default()
        };
        let q = "how many approvals does the release team need for a deploy";
        let hits = s.search(q, &opts, 2_000).unwrap();
        assert_eq!(hits[0].memory.id, m[1].id, "{hits:?}");
        // The hybrid model applied to a keyword-only search ranks it lower.
        let wrong = MemorySearchOptions {
            rerank_keyword: Some(MemoryRanker::BUILT_IN),
            ..opts.clone()
        };
        let p = |o: &MemorySearchOptions, id: &str| {
            s.search(q, o, 2_000)
                .unwrap()
                .into_iter()
                .find(|h| h.memory.id == id)
                .unwrap()
                .relevance
        };
        assert!(p(&opts, &m[1].id) > p(&opts, &m[4].id));
        assert!(
            p(&wrong, &m[1].id) - p(&wrong, &m[4].id) < p(&opts, &m[1].id) - p(&opts, &m[4].id)
        );
    }
}
