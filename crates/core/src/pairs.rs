//! Labelled (question, passage) pairs, what evaluators and rerankers are trained on: built
//! from public sets by `neuralcore_eval::pairs`, exported from the users' own feedback,
//! and consumed by `neuralcore_models::train`. One type and one check for all of them.

use serde::{Deserialize, Serialize};

/// One labelled pair.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, utoipa::ToSchema)]
pub struct Pair {
    /// The question (or query, claim).
    pub question: String,
    /// The passage judged against it.
    pub passage: String,
    /// 1 when the passage is relevant to the question (answers it), 0 when it is not.
    pub label: f32,
    /// Where the pair comes from, for tracing and for keeping held-out data out of
    /// training (e.g. `squad2-train:3:p12:<question id>`, `scifact-train:<query>:<doc>`).
    #[serde(default)]
    pub source: String,
}

impl Pair {
    /// What is wrong with this pair, if anything: an empty question or passage, or a
    /// label other than 0 or 1.
    pub fn problem(&self) -> Option<String> {
        let empty = |s: &str, what: &str| {
            s.trim().is_empty().then(|| {
                if s.is_empty() {
                    format!("the {what} is empty")
                } else {
                    format!("the {what} is only whitespace")
                }
            })
        };
        empty(&self.question, "question")
            .or_else(|| empty(&self.passage, "passage"))
            .or_else(|| {
                (self.label != 0.0 && self.label != 1.0).then(|| {
                    format!(
                        "label {} is neither 0 (not relevant) nor 1 (relevant)",
                        self.label
                    )
                })
            })
    }
}

/// `(relevant, not relevant)` counts, or why a classifier cannot learn from `pairs`: none
/// at all, a bad pair (named by its position and source), or a single class.
pub fn check_pairs(pairs: &[Pair]) -> Result<(usize, usize), String> {
    if pairs.is_empty() {
        return Err(
            "there are no pairs: a classifier needs relevant (label 1) and \
                    non-relevant (label 0) pairs"
                .to_string(),
        );
    }
    let mut positives = 0;
    for (i, p) in pairs.iter().enumerate() {
        if let Some(problem) = p.problem() {
            let source = if p.source.is_empty() {
                String::new()
            } else {
                format!(", source {:?}", p.source)
            };
            return Err(format!(
                "pair {} of {}{source}: {problem}",
                i + 1,
                pairs.len()
            ));
        }
        if p.label == 1.0 {
            positives += 1;
        }
    }
    let (n, negatives) = (pairs.len(), pairs.len() - positives);
    if negatives == 0 {
        return Err(format!(
            "all {n} pairs are relevant (label 1): a classifier needs both relevant and \
             non-relevant (label 0) pairs"
        ));
    }
    if positives == 0 {
        return Err(format!(
            "all {n} pairs are not relevant (label 0): a classifier needs both relevant \
             (label 1) and non-relevant pairs"
        ));
    }
    Ok((positives, negatives))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(q: &str, passage: &str, label: f32) -> Pair {
        Pair {
            question: q.into(),
            passage: passage.into(),
            label,
            source: String::new(),
        }
    }

    #[test]
    fn bad_pairs_are_named() {
        assert!(check_pairs(&[]).unwrap_err().contains("no pairs"));
        let e = check_pairs(&[p("a", "x", 1.0), p(" ", "x", 0.0)]).unwrap_err();
        assert!(e.contains("pair 2 of 2") && e.contains("whitespace"), "{e}");
        let e = check_pairs(&[p("a", "", 1.0)]).unwrap_err();
        assert!(e.contains("passage is empty"), "{e}");
        let e = check_pairs(&[p("a", "x", 1.0), p("b", "x", 0.5)]).unwrap_err();
        assert!(e.contains("neither 0"), "{e}");
        let e = check_pairs(&[p("a", "x", 1.0), p("b", "x", 1.0)]).unwrap_err();
        assert!(e.contains("all 2 pairs are relevant"), "{e}");
        let e = check_pairs(&[p("a", "x", 0.0)]).unwrap_err();
        assert!(e.contains("all 1 pairs are not relevant"), "{e}");
        assert_eq!(
            check_pairs(&[p("a", "x", 1.0), p("b", "x", 0.0)]).unwrap(),
            (1, 1)
        );
    }
}
