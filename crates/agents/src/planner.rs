//! Deterministic query planning: task type, complexity, sub-queries (one per side of a
//! comparison, the relative clause of a multi-hop question, keyword variants), and the
//! names a second hop can follow.

use crate::crag::{collapse_ws, Plan};

/// Words that only shape a question.
const FILLER: &[&str] = &[
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "are", "was",
    "were", "do", "does", "did", "the", "a", "an", "of", "in", "on", "to", "for", "and", "or",
    "that", "this", "it", "its", "by", "with", "from", "as", "at", "be", "been", "can", "could",
];

/// Plan a question without a model.
pub fn plan(query: &str) -> Plan {
    let q = query.trim();
    let lower = q.to_lowercase();
    let words = q.split_whitespace().count();
    let mut queries = vec![q.to_string()];
    let mut reason = String::from("the question as asked");
    let task = if crate::intent::classify(q).is_some() {
        "chit-chat"
    } else if let Some((a, b)) = comparison_sides(q) {
        for side in [&a, &b] {
            let other = if side == &a { &b } else { &a };
            let sub = q.replace(other.as_str(), " ");
            // The connective that joined the sides goes with the other side.
            let sub: Vec<&str> = sub
                .split_whitespace()
                .filter(|w| !["or", "and", "vs", "vs.", "versus", "with"].contains(w))
                .collect();
            queries.push(collapse_ws(
                &sub.join(" ").replace(" ?", "?").replace(" ,", ","),
            ));
        }
        reason = format!("comparison: one query per side ({a:?}, {b:?})");
        "comparison"
    } else if let Some(parts) = aspects_of(q) {
        reason = format!("multi-aspect: one query per aspect ({})", parts.join(" | "));
        queries.extend(parts);
        "multi-aspect"
    } else if lower.starts_with("summarize")
        || lower.starts_with("summarise")
        || lower.contains("overview of")
        || lower.starts_with("what is known about")
    {
        "summary"
    } else if lower.starts_with("how do i")
        || lower.starts_with("how to")
        || lower.starts_with("how can i")
        || lower.contains("steps to")
    {
        "procedural"
    } else if let Some(inner) = relative_clause(q) {
        reason = format!("multi-hop: the relative clause {inner:?} is the first hop");
        queries.push(inner);
        "multi-hop"
    } else {
        "factual"
    };
    let complexity = match (words, queries.len()) {
        (_, n) if n > 2 => "high",
        (w, _) if w > 25 => "high",
        (w, n) if w > 12 || n > 1 => "medium",
        _ => "low",
    };
    let aspects = queries.clone();
    // A keyword variant of the whole question; not for several aspects, whose words
    // together describe nothing one passage holds.
    if complexity == "high" && task != "multi-aspect" {
        let kw = keywords(q);
        if !kw.is_empty() && kw != q {
            queries.push(kw);
        }
    }
    queries.dedup();
    Plan {
        task: task.into(),
        complexity: complexity.into(),
        queries,
        aspects,
        reason,
    }
}

/// Words that open a question of its own.
const QUESTION_OPENERS: &[&str] = &[
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "are", "was",
    "were", "do", "does", "did", "can", "could", "should", "name", "list", "describe", "explain",
];

/// The aspects of a question about several things, each a question of its own: "How do
/// tides relate to the Moon's orbit and what is the borrow checker?" → "How do tides
/// relate to the Moon's orbit?", "What is the borrow checker?". A question splits at
/// "?", ";" and at "and" / ", and" / "also" when what follows opens a question of its own
/// ("what", "who", "how", "is", ...) and what precedes is one too; "What did Tesla and
/// his brother do?" stays whole. `None` for a question about one thing.
pub fn aspects_of(q: &str) -> Option<Vec<String>> {
    let opens = |s: &str| {
        s.split_whitespace()
            .next()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .is_some_and(|w| QUESTION_OPENERS.contains(&w.as_str()))
    };
    let strip_lead = |s: &str| {
        let mut t = s.trim().trim_start_matches([',', ';']).trim();
        for lead in ["and also ", "and ", "also, ", "also ", "plus "] {
            if t.len() > lead.len()
                && t.get(..lead.len())
                    .is_some_and(|h| h.eq_ignore_ascii_case(lead))
            {
                t = t[lead.len()..].trim();
            }
        }
        t.to_string()
    };
    // A part asks something: it opens a question, holds a question word ("These books
    // became a foundational text for what library?"), or opens one after an
    // introductory phrase ("In 1972, did Norway join ...?").
    let asks = |p: &str| {
        let words: Vec<String> = p
            .split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .collect();
        let after_comma = p
            .split_once(',')
            .is_some_and(|(head, rest)| head.split_whitespace().count() <= 4 && opens(rest));
        opens(p)
            || after_comma
            || words.iter().any(|w| {
                [
                    "what", "which", "who", "whom", "whose", "when", "where", "why", "how",
                ]
                .contains(&w.as_str())
            })
    };
    // First cut at "?" and ";" followed by more text.
    let mut pieces: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in q.trim().chars() {
        cur.push(c);
        if c == '?' || c == ';' {
            pieces.push(std::mem::take(&mut cur));
        }
    }
    if !cur.trim().is_empty() {
        pieces.push(cur);
    }
    // Then at "and" (", and", "and also") before a question opener.
    let mut parts: Vec<String> = Vec::new();
    for piece in pieces {
        let body = piece.trim().trim_end_matches(['?', ';', '.']).to_string();
        let words: Vec<&str> = body.split_whitespace().collect();
        let mut start = 0;
        for i in 1..words.len() {
            let w = words[i].to_lowercase();
            if w != "and" && w != "also" && w != "plus" {
                continue;
            }
            let rest = words[i + 1..].join(" ");
            let rest = strip_lead(&rest);
            let head = words[start..i].join(" ");
            // "... the writer of X and who died in 2007?" describes one person: after a
            // bare "and", who / which / whose / that continue a description; a comma
            // ("..., and who ...") or another opener starts a question of its own.
            let comma = words[i - 1].ends_with(',');
            let relative = ["who", "whom", "whose", "which", "that"].contains(
                &rest
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_lowercase()
                    .as_str(),
            );
            let head_asks = opens(&strip_lead(&head)) || (comma && asks(&head));
            if opens(&rest) && head_asks && words[start..i].len() >= 3 && (comma || !relative) {
                parts.push(head);
                start = i;
            }
        }
        parts.push(words[start..].join(" "));
    }
    let parts: Vec<String> = parts
        .iter()
        .map(|p| strip_lead(p))
        .filter(|p| !p.is_empty())
        .map(|p| {
            let p = p.trim_end_matches(['?', ';', '.', ',']).trim();
            let mut c = p.chars();
            let first = c.next().map(|f| f.to_uppercase().collect::<String>());
            format!("{}{}?", first.unwrap_or_default(), c.as_str())
        })
        .collect();
    let whole = parts.len() >= 2
        && parts
            .iter()
            .all(|p| p.split_whitespace().count() >= 3 && asks(p));
    whole.then_some(parts)
}

/// The content words of a question (a keyword variant).
pub fn keywords(q: &str) -> String {
    q.split(|c: char| c.is_whitespace())
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty() && !FILLER.contains(&w.to_lowercase().as_str()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The two sides of a comparison question, if it is one.
pub fn comparison_sides(q: &str) -> Option<(String, String)> {
    let body = q.trim().trim_end_matches(['?', '.', '!']);
    let lower = body.to_lowercase();
    let short = |s: &str| {
        let s = s
            .trim()
            .trim_matches(|c: char| c == '"' || c == ',' || c == '\'');
        let n = s.split_whitespace().count();
        (1..=8).contains(&n).then(|| s.to_string())
    };
    // "..., X or Y?" / "...: X or Y?"
    if let Some(at) = lower.rfind(" or ") {
        let start = body[..at].rfind([',', ':']).map(|i| i + 1);
        if let Some(s) = start {
            if let (Some(a), Some(b)) = (short(&body[s..at]), short(&body[at + 4..])) {
                return Some((a, b));
            }
        }
    }
    for (open, mid) in [
        ("difference between ", " and "),
        ("compare ", " with "),
        ("compare ", " and "),
        ("compare ", " to "),
    ] {
        if let Some(i) = lower.find(open) {
            let rest = &body[i + open.len()..];
            if let Some(j) = rest.to_lowercase().find(mid) {
                if let (Some(a), Some(b)) = (short(&rest[..j]), short(&rest[j + mid.len()..])) {
                    return Some((a, b));
                }
            }
        }
    }
    if let Some(i) = lower.find(" vs") {
        let after = body[i + 3..].trim_start_matches('.');
        if let (Some(a), Some(b)) = (short(&body[..i]), short(after)) {
            return Some((a, b));
        }
    }
    // "... X or Y?" without a comma: X is the run of capitalised words before "or".
    if let Some(at) = lower.rfind(" or ") {
        let before: Vec<&str> = body[..at].split_whitespace().collect();
        let mut run = Vec::new();
        for w in before.iter().rev() {
            if w.chars().next().is_some_and(char::is_uppercase) && run.len() < 6 {
                run.push(*w);
            } else {
                break;
            }
        }
        if !run.is_empty() && run.len() < before.len() {
            run.reverse();
            if let (Some(a), Some(b)) = (short(&run.join(" ")), short(&body[at + 4..])) {
                return Some((a, b));
            }
        }
    }
    // "Are both X and Y ...?": Y is the run of capitalised words after "and".
    if let Some(i) = lower.find(" both ") {
        let rest = &body[i + 6..];
        if let Some(j) = rest.to_lowercase().find(" and ") {
            let b_words: Vec<&str> = rest[j + 5..]
                .split_whitespace()
                .take_while(|w| {
                    w.chars()
                        .next()
                        .is_some_and(|c| c.is_uppercase() || c.is_ascii_digit())
                })
                .collect();
            if let (Some(a), Some(b)) = (short(&rest[..j]), short(&b_words.join(" "))) {
                if lower.starts_with("are both")
                    || lower.starts_with("were both")
                    || lower.starts_with("is both")
                {
                    return Some((a, b));
                }
            }
        }
    }
    // "What ... do X and Y share / have in common?"
    for verb in [" share", " have in common", " both have"] {
        if let Some(end) = lower.rfind(verb) {
            let head = &body[..end];
            let lh = head.to_lowercase();
            if let Some(d) = [" do ", " did ", " does "]
                .iter()
                .filter_map(|x| lh.find(x).map(|p| p + x.len()))
                .min()
            {
                let mid = &head[d..];
                if let Some(j) = mid.to_lowercase().find(" and ") {
                    if let (Some(a), Some(b)) = (short(&mid[..j]), short(&mid[j + 5..])) {
                        return Some((a, b));
                    }
                }
            }
        }
    }
    // "Are X and Y both ...", "Were X and Y of the same ..."
    let first = lower.split_whitespace().next().unwrap_or("");
    if [
        "are", "were", "is", "was", "do", "did", "does", "have", "had",
    ]
    .contains(&first)
    {
        for tail in [
            " both ",
            " the same ",
            " of the same ",
            " from the same ",
            " in the same ",
        ] {
            if let Some(t) = lower.find(tail) {
                let mid = &body[first.len()..t];
                if let Some(j) = mid.to_lowercase().find(" and ") {
                    if let (Some(a), Some(b)) = (short(&mid[..j]), short(&mid[j + 5..])) {
                        return Some((a, b));
                    }
                }
            }
        }
    }
    None
}

/// The relative clause of a question ("... the woman who portrayed X in Y?" → "woman
/// portrayed X in Y"), the first hop of a multi-hop question.
pub fn relative_clause(q: &str) -> Option<String> {
    let body = q.trim().trim_end_matches(['?', '.', '!']);
    let words: Vec<&str> = body.split_whitespace().collect();
    for (i, w) in words.iter().enumerate().skip(2) {
        let lw = w.to_lowercase();
        if ["who", "which", "that", "whose", "where"].contains(&lw.as_str()) && i + 2 < words.len()
        {
            let head = words[i - 1];
            let clause = words[i + 1..].join(" ");
            if clause.split_whitespace().count() >= 2 {
                return Some(format!("{head} {clause}"));
            }
        }
    }
    None
}

/// Runs of capitalised words (names, titles) not at the start of a sentence, and quoted
/// titles: the entities a second hop can follow.
pub fn names_in(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut run: Vec<&str> = Vec::new();
    let connectors = ["of", "the", "and", "de", "von", "van", "for"];
    let flush = |run: &mut Vec<&str>, out: &mut Vec<String>| {
        while run
            .last()
            .is_some_and(|w| connectors.contains(&w.to_lowercase().as_str()))
        {
            run.pop();
        }
        if !run.is_empty() {
            let n = run.join(" ");
            let n = n.trim_matches(|c: char| !c.is_alphanumeric()).to_string();
            if n.chars().count() > 2 && !out.contains(&n) {
                out.push(n);
            }
        }
        run.clear();
    };
    for (i, w) in words.iter().enumerate() {
        let clean = w.trim_matches(|c: char| !c.is_alphanumeric());
        let starts_sentence = i == 0 || words[i - 1].ends_with(['.', '!', '?']);
        let cap = |w: &str| w.chars().next().is_some_and(char::is_uppercase);
        // Every sentence starts with a capital: the first word counts only when the
        // next one is capitalised too ("Big Stone Gap is ...", not "Ignore previous").
        let next_cap = words
            .get(i + 1)
            .is_some_and(|n| cap(n.trim_matches(|c: char| !c.is_alphanumeric())));
        if cap(clean) && !(starts_sentence && run.is_empty() && !next_cap) {
            run.push(clean);
            if w.ends_with([',', '.', ';', ':', ')']) {
                flush(&mut run, &mut out);
            }
        } else if !run.is_empty() && connectors.contains(&clean.to_lowercase().as_str()) {
            run.push(clean);
        } else {
            flush(&mut run, &mut out);
        }
    }
    flush(&mut run, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_are_split_into_sides() {
        let p = plan("Which magazine was started first, Arthur's Magazine or First for Women?");
        assert_eq!(p.task, "comparison");
        assert!(p.queries.len() >= 3, "{:?}", p.queries);
        assert_eq!(
            p.queries[1],
            "Which magazine was started first, Arthur's Magazine?"
        );
        assert_eq!(
            p.queries[2],
            "Which magazine was started first, First for Women?"
        );
        let p = plan("Are Random House Tower and 888 7th Avenue both used for real estate?");
        assert_eq!(p.task, "comparison", "{p:?}");
        assert_eq!(
            comparison_sides("who is younger Keith Bostic or Jerry Glanville ?"),
            Some(("Keith Bostic".into(), "Jerry Glanville".into()))
        );
        assert_eq!(
            comparison_sides("Are both Cypress and Ajuga genera?"),
            Some(("Cypress".into(), "Ajuga".into()))
        );
        assert_eq!(
            comparison_sides("What occupation do Chris Menges and Aram Avakian share?"),
            Some(("Chris Menges".into(), "Aram Avakian".into()))
        );
        // Not comparisons.
        assert_eq!(
            comparison_sides("Is it true or false that tides rise?"),
            None
        );
        assert_eq!(comparison_sides("What did Tesla and his brother do?"), None);
        assert_eq!(
            comparison_sides("What is the difference between BM25 and TF-IDF?"),
            Some(("BM25".into(), "TF-IDF".into()))
        );
    }

    #[test]
    fn relative_clauses_become_the_first_hop() {
        let p = plan("What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?");
        assert_eq!(p.task, "multi-hop");
        assert_eq!(
            p.queries[1],
            "woman portrayed Corliss Archer in the film Kiss and Tell"
        );
    }

    #[test]
    fn questions_about_several_things_are_split_into_aspects() {
        let p = plan("How do tides relate to the Moon's orbit and what is the borrow checker?");
        assert_eq!(p.task, "multi-aspect", "{p:?}");
        assert_eq!(
            p.queries[1..].to_vec(),
            vec![
                "How do tides relate to the Moon's orbit?".to_string(),
                "What is the borrow checker?".to_string()
            ]
        );
        assert_eq!(p.aspects, p.queries[..3].to_vec());
        assert_eq!(
            aspects_of("When was the tower built? Who designed it?"),
            Some(vec![
                "When was the tower built?".into(),
                "Who designed it?".into()
            ])
        );
        assert_eq!(
            aspects_of("In what country is Normandy located; also, these books became a foundational text for what library?"),
            Some(vec![
                "In what country is Normandy located?".into(),
                "These books became a foundational text for what library?".into()
            ])
        );
        assert_eq!(
            aspects_of("Where is Paris; also, what does BM25 stand for?"),
            Some(vec![
                "Where is Paris?".into(),
                "What does BM25 stand for?".into()
            ])
        );
        assert_eq!(
            aspects_of("Who wrote Hamlet, and when did the Globe open, and why did it close?")
                .map(|a| a.len()),
            Some(3)
        );
        assert_eq!(
            aspects_of("What is a commonly used measurement; also, in 1972, did Norway join the European Union?")
                .map(|a| a.len()),
            Some(2)
        );
        assert_eq!(
            aspects_of("The analysis of an algorithm is assigned to what field, and who was the Normans' main enemy in Italy?")
                .map(|a| a.len()),
            Some(2)
        );
        // One thing.
        assert_eq!(aspects_of("What did Tesla and his brother do?"), None);
        assert_eq!(
            aspects_of(
                "Who was the writer of These Boots Are Made for Walkin' and who died in 2007?"
            ),
            None
        );
        assert_eq!(aspects_of("How do tides rise and fall?"), None);
        assert_eq!(aspects_of("What is BM25?"), None);
        assert_eq!(aspects_of("Rust and what?"), None);
    }

    #[test]
    fn plain_questions_stay_whole() {
        let p = plan("When was the Eiffel Tower built?");
        assert_eq!(p.task, "factual");
        assert_eq!(
            p.queries,
            vec!["When was the Eiffel Tower built?".to_string()]
        );
        assert_eq!(p.complexity, "low");
        assert_eq!(plan("hello").task, "chit-chat");
        assert_eq!(plan("How do I reset the index?").task, "procedural");
    }

    #[test]
    fn names_are_found_for_second_hops() {
        let n = names_in(
            "Big Stone Gap is a 2014 American drama film directed by Adriana Trigiani, \
             based in Greenwich Village.",
        );
        assert!(n.contains(&"Adriana Trigiani".to_string()), "{n:?}");
        assert!(n.contains(&"Greenwich Village".to_string()), "{n:?}");
        assert!(n.contains(&"Big Stone Gap".to_string()), "{n:?}");
    }
}
