//! Long-conversation memory evaluation on [LoCoMo](https://github.com/snap-research/LoCoMo):
//! loading the conversations and their questions, and evidence-recall metrics for memory
//! retrieval.
//!
//! A LoCoMo file is a JSON list of conversations. Each has a `sample_id`, a `conversation`
//! object (`speaker_a`, `speaker_b`, and for every session `N` a list `session_N` of dialogue
//! turns `{speaker, dia_id, text, img_url?, blip_caption?}` and a date `session_N_date_time`)
//! and a `qa` list of questions `{question, answer?, adversarial_answer?, evidence, category}`.
//! [`load_locomo`] flattens this into a [`LocomoSet`]: every turn of every session, in order,
//! as a [`Turn`], and every question as a [`MemQuestion`] whose `evidence` lists the `dia_id`s
//! of the turns that hold the answer.
//!
//! `dia_id`s (`D<session>:<turn>`) are unique only within a conversation: `D1:3` exists in
//! every conversation. A caller that stores several conversations in one memory should key
//! turns with [`Turn::key`] (`<sample_id>:<dia_id>`); [`score_memory_retrieval`] accepts both
//! bare and keyed ids.
//!
//! The caller retrieves turns for each question (from that question's conversation),
//! records the retrieved ids in rank order and the latency, and
//! [`score_memory_retrieval`] turns these runs into a [`MemRetrievalReport`]: recall of the
//! evidence turns at 5 and 10 per question category ([`CATEGORY_NAMES`]), over categories
//! 1–4 together, and latency percentiles. [`render_memory_side_by_side`] compares several
//! systems in a text table.

use std::collections::{BTreeMap, HashSet};
use std::ops::RangeInclusive;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::EvalError;
use crate::json::{join, read_json, sample, Doc};
use crate::metrics::{mean, percentile_nearest_rank};

/// The names of the LoCoMo question categories 1 to 5 (index `category - 1`), as in the
/// dataset's documentation: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
/// 5 adversarial (unanswerable from the conversation; the question carries an
/// `adversarial_answer` that a system should *not* give).
pub const CATEGORY_NAMES: [&str; 5] = [
    "multi-hop",
    "temporal",
    "open-domain",
    "single-hop",
    "adversarial",
];

/// The name of a question category (1 to 5), or `None` for any other number.
pub fn category_name(category: u8) -> Option<&'static str> {
    usize::from(category)
        .checked_sub(1)
        .and_then(|i| CATEGORY_NAMES.get(i))
        .copied()
}

/// One dialogue turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// The conversation's `sample_id` (e.g. `conv-26`).
    pub conversation: String,
    /// The turn id within its conversation, e.g. `D3:14` (session 3, turn 14).
    pub dia_id: String,
    /// The session number `N` of the `session_N` list holding the turn.
    pub session: u32,
    /// Who speaks.
    pub speaker: String,
    /// What is said. When the turn shares an image that has a caption, the caption is
    /// appended: `{text} [shares a photo of: {blip_caption}]`.
    pub text: String,
    /// The session's `session_N_date_time`, as written in the file (e.g.
    /// `1:56 pm on 8 May, 2023`); empty when the file has none.
    pub session_date: String,
}

impl Turn {
    /// A key unique across conversations: `<conversation>:<dia_id>` (see [`turn_key`]).
    pub fn key(&self) -> String {
        turn_key(&self.conversation, &self.dia_id)
    }
}

/// The key of turn `dia_id` of conversation `conversation`, unique across conversations:
/// `<conversation>:<dia_id>`, e.g. `conv-26:D1:3`.
pub fn turn_key(conversation: &str, dia_id: &str) -> String {
    format!("{conversation}:{dia_id}")
}

/// A question about a conversation, with its gold data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemQuestion {
    /// The `sample_id` of the conversation the question is about.
    pub conversation: String,
    /// The question text (surrounding whitespace trimmed).
    pub question: String,
    /// The gold answer; numeric answers (e.g. `2022`) are given as text. `None` when the
    /// item has no `answer`, which is the case for most adversarial (category 5) questions.
    pub answer: Option<String>,
    /// The wrong answer an adversarial question baits (`adversarial_answer`); `None` for
    /// other questions.
    pub adversarial_answer: Option<String>,
    /// The `dia_id`s of the turns holding the answer, cleaned: entries holding several ids
    /// are split, slightly malformed ids repaired (`D:11:26` → `D11:26`), and unreadable
    /// ids, ids naming no turn of the conversation and repeats dropped (see
    /// [`EvidenceStats`]). May be empty.
    pub evidence: Vec<String>,
    /// The category, 1 to 5 (see [`CATEGORY_NAMES`]).
    pub category: u8,
}

/// What cleaning the questions' `evidence` lists found; see [`MemQuestion::evidence`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceStats {
    /// Evidence ids kept (summed over the questions).
    pub kept: usize,
    /// Entries holding several ids separated by `;`, `,` or whitespace (e.g.
    /// `"D8:6; D9:17"`), which were split.
    pub split_entries: usize,
    /// Ids written irregularly but readable (e.g. `D:11:26`), rewritten as `D<s>:<t>`.
    pub repaired: usize,
    /// Ids that could not be read (e.g. `D`), dropped.
    pub malformed: usize,
    /// Readable ids naming no turn of the question's conversation, dropped.
    pub missing: usize,
    /// Ids repeated within one question, dropped.
    pub duplicates: usize,
}

/// A loaded LoCoMo dataset (or a selection of its conversations).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocomoSet {
    /// All turns: conversations in file order, sessions by number, turns in session order.
    pub turns: Vec<Turn>,
    /// All questions: conversations in file order, questions in file order.
    pub questions: Vec<MemQuestion>,
    /// What cleaning the evidence lists found.
    pub evidence: EvidenceStats,
    /// Non-fatal problems found while loading, one message each.
    pub warnings: Vec<String>,
}

impl LocomoSet {
    /// The `sample_id`s of the loaded conversations, in file order.
    pub fn conversations(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let turns = self.turns.iter().map(|t| t.conversation.as_str());
        let questions = self.questions.iter().map(|q| q.conversation.as_str());
        for c in turns.chain(questions) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }

    /// The turn `dia_id` of conversation `conversation`, if any (linear search).
    pub fn turn(&self, conversation: &str, dia_id: &str) -> Option<&Turn> {
        self.turns
            .iter()
            .find(|t| t.conversation == conversation && t.dia_id == dia_id)
    }
}

/// Loads a LoCoMo JSON file, optionally only the conversations numbered `conversations`
/// (1-based positions in the file, inclusive).
///
/// Sessions are the keys `session_N` holding a list (a `null` one is skipped); they are
/// read in order of `N`, and each turn gets its session's `session_N_date_time`. A
/// `blip_caption` (the caption of a shared image) is appended to the turn's text. A turn
/// repeating a `dia_id` of its conversation is skipped with a warning.
///
/// Questions keep `answer` and `adversarial_answer` when present (strings or numbers); the
/// evidence ids are cleaned as described at [`MemQuestion::evidence`], every change being
/// counted in [`LocomoSet::evidence`] and reported in [`LocomoSet::warnings`]. Session dates
/// without a session and sessions without a date are also reported there.
///
/// # Errors
/// [`EvalError::MissingFile`], [`EvalError::Io`], [`EvalError::InvalidJson`];
/// [`EvalError::BadShape`] naming the JSON location when the file is not a list of
/// conversations, a field is missing or of the wrong type, a category is not 1 to 5 or two
/// conversations share a `sample_id`; [`EvalError::InvalidSelection`] when `conversations`
/// is empty, starts at 0 or goes past the last conversation.
pub fn load_locomo(
    path: &Path,
    conversations: Option<RangeInclusive<usize>>,
) -> Result<LocomoSet, EvalError> {
    let root = read_json(path)?;
    locomo_from_value(path, &root, conversations)
}

// ---------------------------------------------------------------------------------------
// JSON reading
// ---------------------------------------------------------------------------------------

impl Doc<'_> {
    /// The string field `key` of `o`.
    fn str_field<'v>(
        &self,
        o: &'v Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v str, EvalError> {
        self.str(self.field(o, key, at)?, &join(at, key))
    }

    /// An optional text field: absent or `null` is `None`, a string or a number is its
    /// text.
    fn text_opt(
        &self,
        o: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<Option<String>, EvalError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(self.expected(&join(at, key), "a string or a number", other)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// LoCoMo
// ---------------------------------------------------------------------------------------

/// Examples of each kind of non-fatal problem, for the warnings.
#[derive(Default)]
struct Quirks {
    split: Vec<String>,
    repaired: Vec<String>,
    malformed: Vec<String>,
    missing: Vec<String>,
    duplicate_turns: Vec<String>,
    irregular_turn_ids: Vec<String>,
    dates_without_session: Vec<String>,
    sessions_without_date: Vec<String>,
}

/// The number `N` of `N`, if it is all ASCII digits.
fn session_number(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Reads an evidence id leniently: `D`/`d`, then exactly two runs of digits separated (and
/// possibly preceded or followed) by non-alphanumeric characters. Returns the canonical
/// `D<session>:<turn>`.
fn parse_dia_id(token: &str) -> Option<String> {
    let rest = token.strip_prefix(['D', 'd'])?;
    if rest.chars().any(char::is_alphabetic) {
        return None;
    }
    let groups: Vec<&str> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .collect();
    match groups.as_slice() {
        [session, turn] => {
            let session: u32 = session.parse().ok()?;
            let turn: u32 = turn.parse().ok()?;
            Some(format!("D{session}:{turn}"))
        }
        _ => None,
    }
}

fn locomo_from_value(
    path: &Path,
    root: &Value,
    conversations: Option<RangeInclusive<usize>>,
) -> Result<LocomoSet, EvalError> {
    let d = Doc { path };
    let items = root
        .as_array()
        .ok_or_else(|| d.expected("", "an array of conversations", root))?;
    let selected = match conversations {
        None => 0..items.len(),
        Some(r) => {
            let (first, last) = (*r.start(), *r.end());
            if first == 0 || first > last || last > items.len() {
                return Err(EvalError::InvalidSelection {
                    path: path.to_path_buf(),
                    message: format!(
                        "conversations {first}-{last} requested, but the file has {} \
                         conversations (numbered from 1)",
                        items.len()
                    ),
                });
            }
            first - 1..last
        }
    };

    let mut set = LocomoSet::default();
    let mut quirks = Quirks::default();
    let mut sample_ids: BTreeMap<String, usize> = BTreeMap::new();
    for i in selected {
        let at = format!("[{i}]");
        let o = d.obj(&items[i], &at)?;
        let sample_id = match d.field(o, "sample_id", &at)? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(d.expected(&join(&at, "sample_id"), "a string or a number", other))
            }
        };
        if let Some(first) = sample_ids.insert(sample_id.clone(), i) {
            return Err(d.bad(
                &join(&at, "sample_id"),
                format!("sample_id `{sample_id}` is also the id of conversation [{first}]"),
            ));
        }
        let dia_ids = read_turns(&d, o, &at, &sample_id, &mut set.turns, &mut quirks)?;
        read_questions(&d, o, &at, &sample_id, &dia_ids, &mut set, &mut quirks)?;
    }

    let p = path.display();
    let mut warn = |items: &[String], what: &str| {
        if !items.is_empty() {
            set.warnings
                .push(format!("{p}: {} {what}: {}", items.len(), sample(items)));
        }
    };
    warn(
        &quirks.split,
        "evidence entr(y/ies) held several ids and were split",
    );
    warn(&quirks.repaired, "evidence id(s) repaired");
    warn(
        &quirks.malformed,
        "evidence id(s) could not be read (dropped)",
    );
    warn(
        &quirks.missing,
        "evidence id(s) name no turn of their conversation (dropped)",
    );
    warn(
        &quirks.duplicate_turns,
        "turn(s) repeat a dia_id of their conversation (skipped)",
    );
    warn(
        &quirks.irregular_turn_ids,
        "turn(s) have an irregular dia_id or one naming another session (kept)",
    );
    warn(
        &quirks.sessions_without_date,
        "session(s) without a date (session_date left empty)",
    );
    warn(
        &quirks.dates_without_session,
        "session date(s) without a session (ignored)",
    );
    Ok(set)
}

/// Reads the sessions of conversation `o` into `turns`; returns the conversation's
/// `dia_id`s.
fn read_turns(
    d: &Doc<'_>,
    o: &Map<String, Value>,
    at: &str,
    sample_id: &str,
    turns: &mut Vec<Turn>,
    quirks: &mut Quirks,
) -> Result<HashSet<String>, EvalError> {
    let at_c = join(at, "conversation");
    let conv = d.obj(d.field(o, "conversation", at)?, &at_c)?;
    let mut sessions: BTreeMap<u32, (&str, &Value)> = BTreeMap::new();
    let mut dates: BTreeMap<u32, (&str, &str)> = BTreeMap::new();
    for (key, v) in conv {
        let Some(rest) = key.strip_prefix("session_") else {
            continue;
        };
        if let Some(n) = rest.strip_suffix("_date_time").and_then(session_number) {
            dates.insert(n, (key, d.str(v, &join(&at_c, key))?));
        } else if let Some(n) = session_number(rest) {
            if !v.is_null() {
                sessions.insert(n, (key, v));
            }
        }
    }
    for (n, (key, _)) in &dates {
        if !sessions.contains_key(n) {
            quirks
                .dates_without_session
                .push(format!("{sample_id} {key}"));
        }
    }

    let mut dia_ids = HashSet::new();
    for (&n, &(key, v)) in &sessions {
        let at_s = join(&at_c, key);
        let date = match dates.get(&n) {
            Some(&(_, date)) => date,
            None => {
                quirks
                    .sessions_without_date
                    .push(format!("{sample_id} {key}"));
                ""
            }
        };
        for (j, t) in d.arr(v, &at_s)?.iter().enumerate() {
            let at_t = format!("{at_s}[{j}]");
            let t = d.obj(t, &at_t)?;
            let speaker = d.str_field(t, "speaker", &at_t)?;
            let dia_id = d.str_field(t, "dia_id", &at_t)?.trim();
            let text = d.str_field(t, "text", &at_t)?;
            let caption = match t.get("blip_caption") {
                None | Some(Value::Null) => "",
                Some(c) => d.str(c, &join(&at_t, "blip_caption"))?.trim(),
            };
            if !dia_ids.insert(dia_id.to_string()) {
                quirks.duplicate_turns.push(format!("{sample_id} {dia_id}"));
                continue;
            }
            let regular = parse_dia_id(dia_id).as_deref() == Some(dia_id)
                && dia_id.starts_with(&format!("D{n}:"));
            if !regular {
                quirks
                    .irregular_turn_ids
                    .push(format!("{sample_id} {key} {dia_id}"));
            }
            let text = if caption.is_empty() {
                text.to_string()
            } else {
                format!("{text} [shares a photo of: {caption}]")
            };
            turns.push(Turn {
                conversation: sample_id.to_string(),
                dia_id: dia_id.to_string(),
                session: n,
                speaker: speaker.to_string(),
                text,
                session_date: date.to_string(),
            });
        }
    }
    Ok(dia_ids)
}

/// Reads the questions of conversation `o` into `set`, cleaning their evidence against the
/// conversation's `dia_ids`.
fn read_questions(
    d: &Doc<'_>,
    o: &Map<String, Value>,
    at: &str,
    sample_id: &str,
    dia_ids: &HashSet<String>,
    set: &mut LocomoSet,
    quirks: &mut Quirks,
) -> Result<(), EvalError> {
    let at_qa = join(at, "qa");
    for (j, q) in d.arr(d.field(o, "qa", at)?, &at_qa)?.iter().enumerate() {
        let at_q = format!("{at_qa}[{j}]");
        let q = d.obj(q, &at_q)?;
        let question = d.str_field(q, "question", &at_q)?.trim();
        let at_cat = join(&at_q, "category");
        let category = d.field(q, "category", &at_q)?;
        let category = category
            .as_u64()
            .and_then(|c| u8::try_from(c).ok())
            .filter(|c| (1..=5).contains(c))
            .ok_or_else(|| match category {
                Value::Number(n) => d.bad(&at_cat, format!("expected 1 to 5, found {n}")),
                other => d.expected(&at_cat, "a category number from 1 to 5", other),
            })?;
        let answer = d.text_opt(q, "answer", &at_q)?;
        let adversarial_answer = d.text_opt(q, "adversarial_answer", &at_q)?;

        let at_ev = join(&at_q, "evidence");
        let label = format!("{sample_id} qa[{j}]");
        let mut evidence: Vec<String> = Vec::new();
        for (k, entry) in d
            .arr(d.field(q, "evidence", &at_q)?, &at_ev)?
            .iter()
            .enumerate()
        {
            let entry = d.str(entry, &format!("{at_ev}[{k}]"))?;
            let tokens: Vec<&str> = entry
                .split(|c: char| c == ';' || c == ',' || c.is_whitespace())
                .filter(|t| !t.is_empty())
                .collect();
            if tokens.len() > 1 {
                set.evidence.split_entries += 1;
                quirks.split.push(format!("{label} {entry:?}"));
            }
            if tokens.is_empty() {
                set.evidence.malformed += 1;
                quirks.malformed.push(format!("{label} {entry:?}"));
            }
            for token in tokens {
                let Some(id) = parse_dia_id(token) else {
                    set.evidence.malformed += 1;
                    quirks.malformed.push(format!("{label} {token:?}"));
                    continue;
                };
                if id != token {
                    set.evidence.repaired += 1;
                    quirks.repaired.push(format!("{label} {token:?} -> {id}"));
                }
                if !dia_ids.contains(&id) {
                    set.evidence.missing += 1;
                    quirks.missing.push(format!("{label} {id}"));
                } else if evidence.contains(&id) {
                    set.evidence.duplicates += 1;
                } else {
                    evidence.push(id);
                }
            }
        }
        set.evidence.kept += evidence.len();
        set.questions.push(MemQuestion {
            conversation: sample_id.to_string(),
            question: question.to_string(),
            answer,
            adversarial_answer,
            evidence,
            category,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------

/// How many distinct ids of `evidence` are among the first `k` of `retrieved`, and how many
/// distinct ids `evidence` has.
fn found_at(retrieved: &[String], evidence: &[String], k: usize) -> (usize, usize) {
    let gold: HashSet<&str> = evidence.iter().map(String::as_str).collect();
    let found: HashSet<&str> = retrieved
        .iter()
        .take(k)
        .map(String::as_str)
        .filter(|id| gold.contains(id))
        .collect();
    (found.len(), gold.len())
}

/// Recall@k of the evidence turns: the fraction of the distinct `evidence` ids found among
/// the first `k` `retrieved` ids (`|evidence ∩ top k| / |evidence|`).
///
/// Ids are compared exactly. A retrieved id repeated within the top `k` counts once (but
/// still takes a place, so callers should deduplicate). `None` when `evidence` is empty:
/// such questions are skipped, not scored 0. `k = 0` gives 0.
pub fn evidence_recall(retrieved: &[String], evidence: &[String], k: usize) -> Option<f64> {
    let (found, total) = found_at(retrieved, evidence, k);
    (total > 0).then(|| found as f64 / total as f64)
}

/// Evidence recall and latency over a group of questions; means are over the questions
/// that have evidence, and `None` (JSON `null`) when there are none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecallStats {
    /// Questions scored: with a run and at least one evidence id.
    pub questions: usize,
    /// Questions with a run but no evidence (not scored; their latency counts).
    pub without_evidence: usize,
    /// Mean [`evidence_recall`] at 5.
    pub recall_at_5: Option<f64>,
    /// Mean [`evidence_recall`] at 10.
    pub recall_at_10: Option<f64>,
    /// Fraction of questions with all their evidence in the top 10.
    pub complete_at_10: Option<f64>,
    /// Mean latency in milliseconds over the group's runs (with or without evidence).
    pub latency_mean_ms: Option<f64>,
}

/// [`RecallStats`] of one question category.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryStats {
    /// The category number, 1 to 5.
    pub category: u8,
    /// Its name ([`CATEGORY_NAMES`]).
    pub name: String,
    /// The category's figures.
    #[serde(flatten)]
    pub stats: RecallStats,
}

/// Memory-retrieval scores of one system; see [`score_memory_retrieval`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemRetrievalReport {
    /// Runs scored (one per question at most).
    pub runs: usize,
    /// Questions of the set without a run.
    pub missing_runs: usize,
    /// Runs ignored: for a question index past the end of the set, repeating a question, or
    /// for a question whose category is not 1 to 5.
    pub ignored_runs: usize,
    /// Figures of categories 1 to 5, in that order (always five entries).
    pub categories: Vec<CategoryStats>,
    /// Figures over categories 1–4 together: means over their questions (micro average).
    /// Adversarial questions (category 5) are left out; see `categories[4]`.
    pub overall: RecallStats,
    /// Mean latency in milliseconds over all scored runs.
    pub latency_mean_ms: Option<f64>,
    /// Nearest-rank p50 latency in milliseconds over all scored runs.
    pub latency_p50_ms: Option<f64>,
    /// Nearest-rank p95 latency in milliseconds over all scored runs.
    pub latency_p95_ms: Option<f64>,
}

impl MemRetrievalReport {
    /// The figures of category `category` (1 to 5), if present.
    pub fn category(&self, category: u8) -> Option<&CategoryStats> {
        self.categories.iter().find(|c| c.category == category)
    }

    /// Renders this report as an aligned two-column text table headed by `label`; the same
    /// layout as [`render_memory_side_by_side`] with one system.
    pub fn table(&self, label: &str) -> String {
        render_memory_side_by_side(&[(label.to_string(), self.clone())])
    }
}

/// Per-question values of a group, before averaging.
#[derive(Default)]
struct Acc {
    recall_5: Vec<f64>,
    recall_10: Vec<f64>,
    complete_10: Vec<f64>,
    latencies: Vec<f64>,
    without_evidence: usize,
}

impl Acc {
    fn add(&mut self, retrieved: &[String], evidence: &[String], latency_ms: f64) {
        self.latencies.push(latency_ms);
        let (found_5, total) = found_at(retrieved, evidence, 5);
        if total == 0 {
            self.without_evidence += 1;
            return;
        }
        let (found_10, _) = found_at(retrieved, evidence, 10);
        self.recall_5.push(found_5 as f64 / total as f64);
        self.recall_10.push(found_10 as f64 / total as f64);
        self.complete_10
            .push(if found_10 == total { 1.0 } else { 0.0 });
    }

    fn merge(&mut self, other: &Acc) {
        self.recall_5.extend_from_slice(&other.recall_5);
        self.recall_10.extend_from_slice(&other.recall_10);
        self.complete_10.extend_from_slice(&other.complete_10);
        self.latencies.extend_from_slice(&other.latencies);
        self.without_evidence += other.without_evidence;
    }

    fn stats(&self) -> RecallStats {
        RecallStats {
            questions: self.recall_10.len(),
            without_evidence: self.without_evidence,
            recall_at_5: mean(&self.recall_5),
            recall_at_10: mean(&self.recall_10),
            complete_at_10: mean(&self.complete_10),
            latency_mean_ms: mean(&self.latencies),
        }
    }
}

/// Scores memory-retrieval runs against the evidence of `set`.
///
/// Each run is `(question index into set.questions, retrieved turn ids in rank order,
/// latency in ms)`. Retrieved ids may be bare `dia_id`s (taken to be turns of the question's
/// conversation) or keys `<conversation>:<dia_id>` ([`Turn::key`]); a key of another
/// conversation never matches. Each question's recall@5 and recall@10 are computed with
/// [`evidence_recall`]; questions without evidence are counted but not scored. Categories
/// 1–4 are also pooled into [`MemRetrievalReport::overall`]; category 5 (adversarial) is
/// reported only on its own. Runs for unknown or repeated question indexes are ignored,
/// questions without a run are counted in [`MemRetrievalReport::missing_runs`]. Latency
/// percentiles use [`percentile_nearest_rank`].
pub fn score_memory_retrieval(
    set: &LocomoSet,
    runs: &[(usize, Vec<String>, f64)],
) -> MemRetrievalReport {
    let mut groups: [Acc; 5] = Default::default();
    let mut seen = HashSet::new();
    let mut report = MemRetrievalReport::default();
    let mut latencies = Vec::new();
    for (index, retrieved, latency_ms) in runs {
        let Some(q) = set.questions.get(*index) else {
            report.ignored_runs += 1;
            continue;
        };
        let Some(group) = usize::from(q.category)
            .checked_sub(1)
            .and_then(|i| groups.get_mut(i))
        else {
            report.ignored_runs += 1;
            continue;
        };
        if !seen.insert(*index) {
            report.ignored_runs += 1;
            continue;
        }
        let prefix = format!("{}:", q.conversation);
        let bare: Vec<String> = retrieved
            .iter()
            .map(|id| id.strip_prefix(&prefix).unwrap_or(id).to_string())
            .collect();
        group.add(&bare, &q.evidence, *latency_ms);
        latencies.push(*latency_ms);
    }

    let mut overall = Acc::default();
    for g in &groups[..4] {
        overall.merge(g);
    }
    report.runs = latencies.len();
    report.missing_runs = set.questions.len().saturating_sub(seen.len());
    report.categories = (1u8..)
        .zip(CATEGORY_NAMES)
        .zip(&groups)
        .map(|((category, name), g)| CategoryStats {
            category,
            name: name.to_string(),
            stats: g.stats(),
        })
        .collect();
    report.overall = overall.stats();
    report.latency_mean_ms = mean(&latencies);
    report.latency_p50_ms = percentile_nearest_rank(&latencies, 50.0);
    report.latency_p95_ms = percentile_nearest_rank(&latencies, 95.0);
    report
}

/// The table rows of `r`: (metric name, formatted value). Rates have 4 decimals, latencies
/// 2, unknown values are `-`.
fn memory_rows(r: &MemRetrievalReport) -> Vec<(String, String)> {
    let rate = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.4}"));
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    let stats = |c: u8| r.category(c).map(|c| &c.stats);
    let mut rows = vec![(
        "questions (1-4)".to_string(),
        r.overall.questions.to_string(),
    )];
    for (c, name) in (1u8..=4).zip(CATEGORY_NAMES) {
        rows.push((
            format!("recall@10 {name} ({c})"),
            rate(stats(c).and_then(|s| s.recall_at_10)),
        ));
    }
    rows.push((
        "recall@5 overall (1-4)".to_string(),
        rate(r.overall.recall_at_5),
    ));
    rows.push((
        "recall@10 overall (1-4)".to_string(),
        rate(r.overall.recall_at_10),
    ));
    let adversarial = stats(5);
    rows.push((
        "questions (5)".to_string(),
        adversarial.map_or(0, |s| s.questions).to_string(),
    ));
    rows.push((
        format!("recall@10 {} (5)", CATEGORY_NAMES[4]),
        rate(adversarial.and_then(|s| s.recall_at_10)),
    ));
    rows.push(("latency p50 (ms)".to_string(), ms(r.latency_p50_ms)));
    rows.push(("latency p95 (ms)".to_string(), ms(r.latency_p95_ms)));
    rows
}

/// Renders several memory-retrieval reports side by side, in the layout of
/// [`side_by_side`](crate::side_by_side): one column per `(label, report)` pair (e.g.
/// `memory`, `bm25`, `vector`) in the given order; one row per category 1–4 with its
/// recall@10, then recall@5 and recall@10 over categories 1–4, then category 5 on its own,
/// then latency p50 / p95. Names are left-aligned, values right-aligned, columns separated
/// by two spaces and the header underlined.
pub fn render_memory_side_by_side(rows: &[(String, MemRetrievalReport)]) -> String {
    let names: Vec<String> = memory_rows(&MemRetrievalReport::default())
        .into_iter()
        .map(|r| r.0)
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let columns: Vec<(&str, Vec<String>)> = rows
        .iter()
        .map(|(l, r)| {
            (
                l.as_str(),
                memory_rows(r).into_iter().map(|x| x.1).collect(),
            )
        })
        .collect();
    crate::metrics::render_table(&names, &columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dia_ids_are_read_leniently() {
        assert_eq!(parse_dia_id("D1:3").as_deref(), Some("D1:3"));
        assert_eq!(parse_dia_id("D:11:26").as_deref(), Some("D11:26"));
        assert_eq!(parse_dia_id("d02:7").as_deref(), Some("D2:7"));
        assert_eq!(parse_dia_id("D3-4").as_deref(), Some("D3:4"));
        for bad in ["D", "D1", "D1:2:3", "S1:3", "D1:x3", "", "1:3"] {
            assert_eq!(parse_dia_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn category_names() {
        assert_eq!(category_name(1), Some("multi-hop"));
        assert_eq!(category_name(5), Some("adversarial"));
        assert_eq!(category_name(0), None);
        assert_eq!(category_name(6), None);
    }
}
