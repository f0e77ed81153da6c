//! Conflicting evidence, one mechanism for documents and memories.
//!
//! Two pieces of evidence conflict when they make the same statement with a different
//! value — a place, a date, a number, a name ([`disagreement`]): "The game was played at
//! Levi's Stadium" against "The game was played at the Rose Bowl". Memories linked
//! CONTRADICTS conflict by declaration. Either way the answer does not silently pick a
//! side: the sides become a [`Conflict`], weighed by [`weigh`] (independent sources, then
//! trust, then recency, where known), and stated in the answer by [`sentence`].
//! Verification ([`crate::tools`]'s `verify`) uses the same test: a second document that
//! disputes a chunk makes it relevant and disputed, not dropped.

use std::collections::HashSet;

use crate::crag::{numbers, AnswerSentence, Conflict, ConflictSide, Strip};
use crate::values::{norm, value_kind};

/// How two statements differ: what kind of value, and each one's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// `date`, `number` or `name` (`value` when the two differ in kind).
    pub about: &'static str,
    /// The first statement's value.
    pub mine: String,
    /// The second statement's value.
    pub theirs: String,
}

/// Content words of a sentence (lower case, longer than three letters), for overlap.
fn content(text: &str) -> HashSet<String> {
    text.split_whitespace()
        .map(norm)
        .filter(|w| w.chars().count() > 3)
        .collect()
}

/// Whether `a` and `b` make the same statement with a different value, and which values.
///
/// The same statement: the words before and after the difference are shared and make up
/// most of both sentences, and what differs is short and a value on both sides (a date,
/// a number, a name). A paraphrase that shares most of its content words with the other
/// but states other figures disagrees on the number. Two sentences that differ in
/// anything else (another subject, another verb) do not disagree: they are about
/// different things.
pub fn disagreement(a: &str, b: &str) -> Option<Disagreement> {
    let wa: Vec<&str> = a.split_whitespace().collect();
    let wb: Vec<&str> = b.split_whitespace().collect();
    let (na, nb) = (wa.len(), wb.len());
    let mut p = 0;
    while p < na.min(nb) && norm(wa[p]) == norm(wb[p]) {
        p += 1;
    }
    let mut s = 0;
    while s < (na - p).min(nb - p) && norm(wa[na - 1 - s]) == norm(wb[nb - 1 - s]) {
        s += 1;
    }
    let (x, y) = (&wa[p..na - s], &wb[p..nb - s]);
    let shared = p + s;
    if !x.is_empty()
        && !y.is_empty()
        && x.len() <= 8
        && y.len() <= 8
        && shared >= 3
        && shared * 10 >= 6 * na.max(nb)
    {
        // Each side's value must say something the other sentence does not (words moved
        // around, "The tower in Paris" / "In Paris, the tower", are no other value).
        let (in_a, in_b): (HashSet<String>, HashSet<String>) = (
            wa.iter().map(|w| norm(w)).collect(),
            wb.iter().map(|w| norm(w)).collect(),
        );
        let new_x: Vec<&str> = x
            .iter()
            .copied()
            .filter(|w| !in_b.contains(&norm(w)))
            .collect();
        let new_y: Vec<&str> = y
            .iter()
            .copied()
            .filter(|w| !in_a.contains(&norm(w)))
            .collect();
        if new_x.is_empty() || new_y.is_empty() {
            return None;
        }
        // A sentence's first word is capitalised whatever it is: it counts as a name
        // ("Sweden rationed …" / "Norway rationed …") unless it opens the sentence
        // without naming anything ("The", "He", "During", "However,").
        let lead = |new: &[&str], w: &[&str]| {
            p == 0 && new.first() == w.first() && crate::values::is_opener(w[0])
        };
        let (lead_x, lead_y) = (lead(&new_x, x), lead(&new_y, y));
        if let (Some(kx), Some(ky)) = (value_kind(&new_x, lead_x), value_kind(&new_y, lead_y)) {
            let about = if kx == ky { kx } else { "value" };
            // A figure keeps its currency sign and the unit word both sides share after
            // it ("$2.2 billion" against "$37.6 billion", not "2.2" against "37.6").
            let unit = wa
                .get(na - s)
                .and_then(|w| unit_word(w))
                .filter(|w| about == "number" && *w != "per");
            let clean = |w: &[&str]| {
                let v = w
                    .join(" ")
                    .trim_start_matches(|c: char| {
                        !c.is_alphanumeric() && c != '\'' && !"$€£".contains(c)
                    })
                    .trim_end_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '%')
                    .to_string();
                match unit {
                    Some(u) if v.ends_with(|c: char| c.is_ascii_digit()) => format!("{v} {u}"),
                    _ => v,
                }
            };
            if norm(&x.join(" ")) != norm(&y.join(" ")) {
                return Some(Disagreement {
                    about,
                    mine: clean(x),
                    theirs: clean(y),
                });
            }
        }
        return None;
    }
    // A paraphrase with other figures.
    let (ca, cb) = (content(a), content(b));
    let overlap = ca.intersection(&cb).count() as f32 / ca.len().min(cb.len()).max(1) as f32;
    let (fa, fb) = (numbers(a), numbers(b));
    if overlap >= 0.6 && !fa.is_empty() && !fb.is_empty() && fa.is_disjoint(&fb) {
        let (mine, theirs) = (figures(a), figures(b));
        let words: Vec<&str> = mine
            .split_whitespace()
            .chain(theirs.split_whitespace())
            .collect();
        return Some(Disagreement {
            about: value_kind(&words, false).unwrap_or("number"),
            mine,
            theirs,
        });
    }
    None
}

/// Words that give a figure its unit ("$2.2 billion", "6,400 km").
const UNITS: &[&str] = &[
    "thousand",
    "million",
    "billion",
    "trillion",
    "percent",
    "per",
    "km",
    "kilometres",
    "kilometers",
    "miles",
    "metres",
    "meters",
    "feet",
    "kg",
    "tons",
    "tonnes",
    "years",
    "days",
    "hours",
    "minutes",
    "people",
    "dollars",
    "euros",
    "pounds",
    "%",
];

/// `w` without its punctuation, when it is a unit word ([`UNITS`]).
fn unit_word(w: &str) -> Option<&str> {
    let n = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '%');
    UNITS.contains(&n.to_lowercase().as_str()).then_some(n)
}

/// The figures of a sentence as it writes them, with a currency sign and a unit word
/// that follows ("$2.2 billion", "6,400 km"), joined by ", ".
fn figures(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out: Vec<String> = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if !w.chars().any(|c| c.is_ascii_digit()) {
            continue;
        }
        let mut f = w
            .trim_matches(|c: char| !c.is_alphanumeric() && !"$€£%".contains(c))
            .to_string();
        if let Some(n) = words.get(i + 1).and_then(|w| unit_word(w)) {
            f = format!("{f} {n}");
        }
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out.join(", ")
}

/// Whether `a` and `b` state the same thing: nearly all the content words of the
/// shorter are in the other, with the same figures, and no value differs ("The tower in
/// Paris was completed in 1889" / "In Paris, the tower was completed in 1889"): a second
/// source that agrees.
pub fn agrees(a: &str, b: &str) -> bool {
    let (ca, cb) = (content(a), content(b));
    if ca.is_empty() || cb.is_empty() || numbers(a) != numbers(b) {
        return false;
    }
    let overlap = ca.intersection(&cb).count() as f32 / ca.len().min(cb.len()) as f32;
    overlap >= 0.8 && disagreement(a, b).is_none()
}

/// What the weighing knows of a strip's source: its trust (memories) and its newest
/// date (documents' provenance), when known.
pub type SourceMeta<'a> = dyn Fn(&Strip) -> (Option<f32>, Option<String>) + 'a;

/// One side among strips: its value and the strips (indices) stating it.
pub type StripSide = (String, Vec<usize>);

/// The sides of a disagreement between strip `i` and the other kept strips (of other
/// sources), if any: what it is about, and each side's value with the strips stating it
/// (strip `i` and the strips agreeing with it first), the better-supported side first
/// (more independent sources, then higher trust, then the more recent, by `meta`'s
/// trust and date of a strip's source; ties keep that order), as [`weigh`] orders them.
pub fn strip_sides(
    strips: &[Strip],
    i: usize,
    meta: &SourceMeta<'_>,
) -> Option<(&'static str, Vec<StripSide>)> {
    let anchor = strips.get(i)?;
    let src = anchor.evidence.source();
    let mut mine = vec![i];
    let mut about = None;
    let mut my_value = None;
    let mut others: Vec<StripSide> = Vec::new();
    for (k, s) in strips.iter().enumerate() {
        if k == i || s.evidence.source() == src {
            continue;
        }
        if agrees(&anchor.text, &s.text) {
            mine.push(k);
        } else if let Some(d) = disagreement(&anchor.text, &s.text) {
            about.get_or_insert(d.about);
            my_value.get_or_insert(d.mine);
            match others.iter_mut().find(|o| same_value(&o.0, &d.theirs)) {
                Some(o) => o.1.push(k),
                None => others.push((d.theirs, vec![k])),
            }
        }
    }
    let about = about?;
    let mut sides = vec![(my_value?, mine)];
    sides.extend(others);
    // Each side's key once (a strip's meta may read the store): independent sources,
    // trust, newest date; the stable sort keeps the anchor's side first on ties.
    let key = |idx: &[usize]| {
        let metas: Vec<(Option<f32>, Option<String>)> =
            idx.iter().map(|&k| meta(&strips[k])).collect();
        let sources = idx
            .iter()
            .map(|&k| strips[k].evidence.source())
            .collect::<HashSet<_>>()
            .len();
        let trust = metas.iter().filter_map(|m| m.0).fold(0.0f32, f32::max);
        let newest = metas.into_iter().filter_map(|m| m.1).max();
        (sources, trust, newest)
    };
    let mut keyed: Vec<_> = sides.into_iter().map(|s| (key(&s.1), s)).collect();
    keyed.sort_by(|(a, _), (b, _)| {
        b.0.cmp(&a.0)
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| b.2.cmp(&a.2))
    });
    let sides: Vec<StripSide> = keyed.into_iter().map(|(_, s)| s).collect();
    Some((about, sides))
}

/// Two values are the same when their words are (letter case and punctuation aside).
fn same_value(a: &str, b: &str) -> bool {
    let w = |s: &str| s.split_whitespace().map(norm).collect::<Vec<_>>();
    w(a) == w(b)
}

/// One side as the weighing sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// What it states.
    pub value: String,
    /// Citation numbers.
    pub citations: Vec<usize>,
    /// Its independent sources (document ids or memory ids).
    pub sources: Vec<String>,
    /// Trust of its most trusted source, when known.
    pub trust: Option<f32>,
    /// Its newest source's date (RFC 3339 or any sortable date), when known.
    pub date: Option<String>,
}

/// Weigh the sides of a disagreement into a [`Conflict`], the stronger first: more
/// independent sources, then higher trust, then the more recent; when nothing separates
/// them, the order they came in and the weighing says so.
pub fn weigh(about: &str, mut sides: Vec<Side>) -> Conflict {
    let key = |s: &Side| (s.sources.len(), s.trust.unwrap_or(0.0), s.date.clone());
    sides.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.cmp(&ka.0)
            .then(kb.1.total_cmp(&ka.1))
            .then(kb.2.cmp(&ka.2))
    });
    let total: usize = sides.iter().map(|s| s.sources.len()).sum::<usize>().max(1);
    let q = |s: &Side| format!("\"{}\"", s.value.trim());
    let weighing = match (sides.first(), sides.get(1)) {
        (Some(a), Some(b)) if a.sources.len() > b.sources.len() => format!(
            "{} {} state {}, {} {} {}",
            a.sources.len(),
            plural(a.sources.len(), "source", "sources"),
            q(a),
            b.sources.len(),
            plural(b.sources.len(), "states", "state"),
            q(b)
        ),
        (Some(a), Some(b)) if a.trust.unwrap_or(0.0) > b.trust.unwrap_or(0.0) => format!(
            "{} comes from the more trusted source (trust {:.2} against {:.2}); {} is the lower-trust side",
            q(a),
            a.trust.unwrap_or(0.0),
            b.trust.unwrap_or(0.0),
            q(b)
        ),
        (Some(a), Some(b)) if a.date > b.date && b.date.is_some() => format!(
            "{} is from the more recent source ({} against {})",
            q(a),
            a.date.as_deref().unwrap_or(""),
            b.date.as_deref().unwrap_or("")
        ),
        _ => "nothing here says which is right, so both are given".to_string(),
    };
    Conflict {
        about: about.to_string(),
        sides: sides
            .iter()
            .map(|s| ConflictSide {
                value: s.value.clone(),
                citations: s.citations.clone(),
                sources: s.sources.len(),
                trust: s.trust,
                weight: s.sources.len() as f32 / total as f32,
            })
            .collect(),
        weighing,
    }
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// The sentence an answer states a conflict with, citing every side.
pub fn sentence(c: &Conflict) -> AnswerSentence {
    let sides: Vec<String> = c
        .sides
        .iter()
        .map(|s| format!("\"{}\"", s.value.trim()))
        .collect();
    let what = match c.about.as_str() {
        "date" => " on the date",
        "number" => " on the figure",
        "name" => " on the name",
        _ => "",
    };
    let mut citations: Vec<usize> = c.sides.iter().flat_map(|s| s.citations.clone()).collect();
    citations.dedup();
    AnswerSentence {
        text: format!(
            "Note: the sources disagree{what}: {} against {}; {}.",
            sides.first().cloned().unwrap_or_default(),
            sides.get(1..).unwrap_or_default().join(" and "),
            c.weighing
        ),
        citations,
        support: None,
        supported: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_statement_with_another_value_disagrees() {
        let d = disagreement(
            "Super Bowl 50 was played at Levi's Stadium in Santa Clara.",
            "Super Bowl 50 was played at the Rose Bowl in Santa Clara.",
        )
        .unwrap();
        assert_eq!(d.about, "name");
        assert_eq!(d.mine, "Levi's Stadium");
        assert_eq!(d.theirs, "the Rose Bowl");
        let d = disagreement(
            "The tower was completed in 1889 for the fair.",
            "The tower was completed in 1925 for the fair.",
        )
        .unwrap();
        assert_eq!(
            (d.about, d.mine.as_str(), d.theirs.as_str()),
            ("date", "1889", "1925")
        );
        let d = disagreement(
            "The staging gate requires two approvals before a deploy.",
            "The staging gate requires three approvals before a deploy.",
        )
        .unwrap();
        assert_eq!(d.about, "number");
        // The same statement with another sum keeps its sign and its unit word.
        let d = disagreement(
            "On October 19, Nixon requested $2.2 billion in emergency aid to Israel.",
            "On October 19, Nixon requested $37.6 billion in emergency aid to Israel.",
        )
        .unwrap();
        assert_eq!(
            (d.mine.as_str(), d.theirs.as_str()),
            ("$2.2 billion", "$37.6 billion")
        );
        // A year is no figure with a unit.
        let d = disagreement(
            "In 1990 people moved to the coast for work.",
            "In 1995 people moved to the coast for work.",
        )
        .unwrap();
        assert_eq!((d.mine.as_str(), d.theirs.as_str()), ("1990", "1995"));
        // A paraphrase with other figures.
        let d = disagreement(
            "The Amazon river is about 6,400 km long and drains a huge basin.",
            "Measured along its course, the Amazon river drains a huge basin and is 7,000 km long.",
        )
        .unwrap();
        assert_eq!(
            (d.mine.as_str(), d.theirs.as_str()),
            ("6,400 km", "7,000 km")
        );
        let d = disagreement(
            "Revenue for the year reached $2.2 billion, the company said in its report.",
            "The company said in its yearly report that revenue reached $37.6 billion in total.",
        )
        .unwrap();
        assert_eq!(
            (d.mine.as_str(), d.theirs.as_str()),
            ("$2.2 billion", "$37.6 billion")
        );
    }

    #[test]
    fn a_name_opening_the_sentence_is_a_value() {
        let d = disagreement(
            "Sweden rationed gasoline and heating oil.",
            "Abercynon rationed gasoline and heating oil.",
        )
        .unwrap();
        assert_eq!(
            (d.about, d.mine.as_str(), d.theirs.as_str()),
            ("name", "Sweden", "Abercynon")
        );
        let d = disagreement(
            "Montpellier was among the most important of the 66 villes de sûreté.",
            "USSR was among the most important of the 66 villes de sûreté.",
        )
        .unwrap();
        assert_eq!(
            (d.mine.as_str(), d.theirs.as_str()),
            ("Montpellier", "USSR")
        );
        // Pronouns, function words and sentence adverbs open the same statement in
        // other words; a name ending in "ly" is still a name.
        let d = disagreement(
            "Italy declared war on the empire in May.",
            "Romania declared war on the empire in May.",
        )
        .unwrap();
        assert_eq!((d.mine.as_str(), d.theirs.as_str()), ("Italy", "Romania"));
        for (a, b) in [
            (
                "He was born in Ulm in 1879.",
                "Einstein was born in Ulm in 1879.",
            ),
            (
                "His wife died in 1990 in Berlin.",
                "Her husband died in 1990 in Berlin.",
            ),
            (
                "During the war the bridge was closed.",
                "After the war the bridge was closed.",
            ),
            (
                "Later the bridge was closed to traffic.",
                "Afterwards the bridge was closed to traffic.",
            ),
            (
                "The tower was completed in 1889 for the fair.",
                "A tower was completed in 1889 for the fair.",
            ),
            (
                "However, the tower was completed in 1889.",
                "Thus, the tower was completed in 1889.",
            ),
            (
                "Similarly the tower was completed in 1889.",
                "Later the tower was completed in 1889.",
            ),
            (
                "Then the tower was completed in 1889.",
                "Eventually the tower was completed in 1889.",
            ),
        ] {
            assert_eq!(disagreement(a, b), None, "{a} / {b}");
        }
        let d = disagreement(
            "US forces landed at Normandy in 1944.",
            "British forces landed at Normandy in 1944.",
        )
        .unwrap();
        assert_eq!((d.mine.as_str(), d.theirs.as_str()), ("US", "British"));
        assert!(agrees(
            "He was born in Ulm in 1879.",
            "Einstein was born in Ulm in 1879."
        ));
        // One name spelt with and without its accents is no other value.
        assert_eq!(
            disagreement(
                "The theorem was proved by Kurt Gödel in 1931.",
                "The theorem was proved by Kurt Godel in 1931."
            ),
            None
        );
    }

    #[test]
    fn different_statements_do_not_disagree() {
        // Another verb, not another value.
        assert_eq!(
            disagreement(
                "The bridge was opened in 1932.",
                "The bridge was closed in 1932."
            ),
            None
        );
        // Different subjects entirely.
        assert_eq!(
            disagreement(
                "Tides are caused by the Moon.",
                "Rust has a borrow checker."
            ),
            None
        );
        // The same value.
        assert_eq!(
            disagreement("It opened in 1932.", "It opened in 1932!"),
            None
        );
        // The same words in another order.
        assert_eq!(
            disagreement(
                "The Eiffel Tower in Paris was completed in 1889 by the company.",
                "In Paris, the Eiffel Tower was completed in 1889 by the company."
            ),
            None
        );
        assert!(agrees("It opened in 1932.", "it opened in 1932"));
        assert!(agrees(
            "The Eiffel Tower in Paris was completed in 1889 by the company.",
            "In Paris, the Eiffel Tower was completed in 1889 by the company."
        ));
        assert!(!agrees("It opened in 1932.", "It opened in 1933."));
        assert!(!agrees(
            "Tides are caused by the Moon.",
            "Rust has a borrow checker."
        ));
    }

    #[test]
    fn sides_are_weighed_by_sources_then_trust_then_recency() {
        let side = |v: &str, n: usize, trust: Option<f32>, date: Option<&str>| Side {
            value: v.into(),
            citations: vec![n],
            sources: (0..n).map(|i| format!("{v}{i}")).collect(),
            trust,
            date: date.map(String::from),
        };
        let c = weigh(
            "date",
            vec![side("1887", 1, None, None), side("1889", 2, None, None)],
        );
        assert_eq!(c.sides[0].value, "1889");
        assert!(c
            .weighing
            .starts_with("2 sources state \"1889\", 1 states \"1887\""));
        assert!((c.sides[0].weight - 2.0 / 3.0).abs() < 1e-6);
        let c = weigh(
            "statement",
            vec![side("a", 1, Some(0.4), None), side("b", 1, Some(0.8), None)],
        );
        assert_eq!(c.sides[0].value, "b");
        assert!(c.weighing.contains("lower-trust side"));
        let c = weigh(
            "name",
            vec![
                side("old", 1, None, Some("2019-01-01")),
                side("new", 1, None, Some("2024-01-01")),
            ],
        );
        assert_eq!(c.sides[0].value, "new");
        let c = weigh(
            "name",
            vec![side("x", 1, None, None), side("y", 1, None, None)],
        );
        assert_eq!(c.sides[0].value, "x");
        assert!(c.weighing.contains("both are given"));
        let s = sentence(&c);
        assert!(
            s.text.contains("\"x\"") && s.text.contains("\"y\""),
            "{}",
            s.text
        );
        assert!(
            !neuralcore_core::sentence::is_fragment(&s.text),
            "{}",
            s.text
        );
    }
}
