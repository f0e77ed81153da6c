//! IR metrics with `trec_eval` / `pytrec_eval` definitions (as used by BEIR), per-query
//! bundles, summaries and text tables.
//!
//! All metric functions take:
//! * `ranked`: the retrieved document ids, best first, **already de-duplicated** (a
//!   repeated id would be counted twice);
//! * `qrels`: the query's judgments, corpus id → graded relevance. A document is relevant
//!   when its score is > 0; documents absent from `qrels` (or with score 0) are not
//!   relevant;
//! * `k`: the cutoff; only `ranked[..k]` is looked at. `k = 0` yields 0.
//!
//! A query with **no relevant document** gets 0 for every metric (including recall,
//! whose denominator would be 0). Such queries should be skipped rather than averaged in;
//! [`BeirDataset`](crate::BeirDataset) already leaves them out.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

fn relevance(qrels: &HashMap<String, u32>, doc: &str) -> u32 {
    qrels.get(doc).copied().unwrap_or(0)
}

fn num_relevant(qrels: &HashMap<String, u32>) -> usize {
    qrels.values().filter(|&&r| r > 0).count()
}

/// Number of relevant documents in `ranked[..k]`.
fn relevant_retrieved(ranked: &[String], qrels: &HashMap<String, u32>, k: usize) -> usize {
    ranked
        .iter()
        .take(k)
        .filter(|d| relevance(qrels, d) > 0)
        .count()
}

/// Discount of 1-based rank `rank`: `log2(rank + 1)`.
fn discount(rank: usize) -> f64 {
    ((rank + 1) as f64).log2()
}

/// nDCG@k with graded gains, as `ndcg_cut_k` of `trec_eval` / `pytrec_eval`.
///
/// `DCG@k = Σ_{i=1..k} rel_i / log2(i + 1)` where `rel_i` is the qrels score of the
/// document at rank `i` (0 when unjudged); the gain is the score itself (not
/// `2^rel - 1`). `IDCG@k` is the same sum over the qrels scores sorted in decreasing order
/// (relevant documents that were not retrieved count here). Returns `DCG@k / IDCG@k`, or 0
/// when `IDCG@k` is 0 (no relevant document) or `k = 0`.
pub fn ndcg_at_k(ranked: &[String], qrels: &HashMap<String, u32>, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| f64::from(relevance(qrels, d)) / discount(i + 1))
        .sum();
    let mut ideal: Vec<u32> = qrels.values().copied().filter(|&r| r > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &r)| f64::from(r) / discount(i + 1))
        .sum();
    if idcg > 0.0 {
        dcg / idcg
    } else {
        0.0
    }
}

/// Recall@k: relevant documents in the top `k` divided by the total number of relevant
/// documents (score > 0) in `qrels`. Returns 0 when there is no relevant document.
pub fn recall_at_k(ranked: &[String], qrels: &HashMap<String, u32>, k: usize) -> f64 {
    let total = num_relevant(qrels);
    if total == 0 {
        return 0.0;
    }
    relevant_retrieved(ranked, qrels, k) as f64 / total as f64
}

/// Precision@k: relevant documents in the top `k` divided by `k` (as `P_k` in
/// `trec_eval`: the denominator is `k` even when fewer than `k` documents were retrieved).
/// Returns 0 when `k = 0`.
pub fn precision_at_k(ranked: &[String], qrels: &HashMap<String, u32>, k: usize) -> f64 {
    if k == 0 {
        return 0.0;
    }
    relevant_retrieved(ranked, qrels, k) as f64 / k as f64
}

/// MRR@k (reciprocal rank): `1 / rank` of the first relevant document within the top `k`
/// (1-based rank), or 0 when none is there.
pub fn mrr_at_k(ranked: &[String], qrels: &HashMap<String, u32>, k: usize) -> f64 {
    ranked
        .iter()
        .take(k)
        .position(|d| relevance(qrels, d) > 0)
        .map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// hit@k (success@k): 1 if any relevant document is within the top `k`, else 0.
pub fn hit_at_k(ranked: &[String], qrels: &HashMap<String, u32>, k: usize) -> f64 {
    if relevant_retrieved(ranked, qrels, k) > 0 {
        1.0
    } else {
        0.0
    }
}

/// The metrics of one query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryMetrics {
    /// nDCG@10, see [`ndcg_at_k`].
    pub ndcg_at_10: f64,
    /// Recall@10, see [`recall_at_k`].
    pub recall_at_10: f64,
    /// Recall@100, see [`recall_at_k`].
    pub recall_at_100: f64,
    /// MRR@10, see [`mrr_at_k`].
    pub mrr_at_10: f64,
    /// Precision@10, see [`precision_at_k`].
    pub precision_at_10: f64,
    /// hit@1, see [`hit_at_k`].
    pub hit_at_1: f64,
    /// hit@5, see [`hit_at_k`].
    pub hit_at_5: f64,
    /// hit@10, see [`hit_at_k`].
    pub hit_at_10: f64,
}

impl QueryMetrics {
    /// Computes all metrics of one query from its ranking (best first, de-duplicated; at
    /// least 100 results are needed for a meaningful Recall@100) and its qrels.
    pub fn compute(ranked: &[String], qrels: &HashMap<String, u32>) -> QueryMetrics {
        QueryMetrics {
            ndcg_at_10: ndcg_at_k(ranked, qrels, 10),
            recall_at_10: recall_at_k(ranked, qrels, 10),
            recall_at_100: recall_at_k(ranked, qrels, 100),
            mrr_at_10: mrr_at_k(ranked, qrels, 10),
            precision_at_10: precision_at_k(ranked, qrels, 10),
            hit_at_1: hit_at_k(ranked, qrels, 1),
            hit_at_5: hit_at_k(ranked, qrels, 5),
            hit_at_10: hit_at_k(ranked, qrels, 10),
        }
    }
}

/// Mean metrics over a set of queries, plus query latency statistics.
///
/// Metric fields are arithmetic means over the queries (0 when there are none). Latency
/// fields are `None` when no latency was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of queries averaged over.
    pub queries: usize,
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean Recall@10.
    pub recall_at_10: f64,
    /// Mean Recall@100.
    pub recall_at_100: f64,
    /// Mean MRR@10.
    pub mrr_at_10: f64,
    /// Mean Precision@10.
    pub precision_at_10: f64,
    /// Mean hit@1.
    pub hit_at_1: f64,
    /// Mean hit@5.
    pub hit_at_5: f64,
    /// Mean hit@10.
    pub hit_at_10: f64,
    /// Mean latency in milliseconds.
    pub latency_mean_ms: Option<f64>,
    /// Median latency (nearest-rank p50, see [`percentile_nearest_rank`]) in milliseconds.
    pub latency_p50_ms: Option<f64>,
    /// Nearest-rank p95 latency in milliseconds.
    pub latency_p95_ms: Option<f64>,
    /// Nearest-rank p99 latency in milliseconds.
    pub latency_p99_ms: Option<f64>,
}

impl Summary {
    /// Averages `per_query` and computes latency statistics over `latencies_ms`.
    ///
    /// The two slices are independent (`latencies_ms` need not have one entry per query,
    /// e.g. when warm-up queries are timed but not scored). Percentiles use the
    /// nearest-rank definition of [`percentile_nearest_rank`].
    pub fn from(per_query: &[QueryMetrics], latencies_ms: &[f64]) -> Summary {
        let n = per_query.len();
        let mean = |f: fn(&QueryMetrics) -> f64| {
            if n == 0 {
                0.0
            } else {
                per_query.iter().map(f).sum::<f64>() / n as f64
            }
        };
        let mut sorted = latencies_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let latency_mean_ms = if sorted.is_empty() {
            None
        } else {
            Some(sorted.iter().sum::<f64>() / sorted.len() as f64)
        };
        Summary {
            queries: n,
            ndcg_at_10: mean(|m| m.ndcg_at_10),
            recall_at_10: mean(|m| m.recall_at_10),
            recall_at_100: mean(|m| m.recall_at_100),
            mrr_at_10: mean(|m| m.mrr_at_10),
            precision_at_10: mean(|m| m.precision_at_10),
            hit_at_1: mean(|m| m.hit_at_1),
            hit_at_5: mean(|m| m.hit_at_5),
            hit_at_10: mean(|m| m.hit_at_10),
            latency_mean_ms,
            latency_p50_ms: nearest_rank_sorted(&sorted, 50.0),
            latency_p95_ms: nearest_rank_sorted(&sorted, 95.0),
            latency_p99_ms: nearest_rank_sorted(&sorted, 99.0),
        }
    }

    /// Renders this summary as an aligned two-column text table (metric names, then one
    /// column headed by `label`). Same layout as [`side_by_side`] with one configuration.
    pub fn table(&self, label: &str) -> String {
        render(&[(label, self)])
    }

    /// The table rows: (metric name, formatted value).
    fn rows(&self) -> Vec<(&'static str, String)> {
        let metric = |v: f64| format!("{v:.4}");
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        vec![
            ("nDCG@10", metric(self.ndcg_at_10)),
            ("Recall@10", metric(self.recall_at_10)),
            ("Recall@100", metric(self.recall_at_100)),
            ("MRR@10", metric(self.mrr_at_10)),
            ("P@10", metric(self.precision_at_10)),
            ("Hit@1", metric(self.hit_at_1)),
            ("Hit@5", metric(self.hit_at_5)),
            ("Hit@10", metric(self.hit_at_10)),
            ("queries", self.queries.to_string()),
            ("latency mean (ms)", ms(self.latency_mean_ms)),
            ("latency p50 (ms)", ms(self.latency_p50_ms)),
            ("latency p95 (ms)", ms(self.latency_p95_ms)),
            ("latency p99 (ms)", ms(self.latency_p99_ms)),
        ]
    }
}

/// Renders several configurations side by side: one row per metric, one column per
/// `(label, summary)` pair, in the given order. Metric names are left-aligned, values
/// right-aligned; columns are separated by two spaces and the header is underlined.
/// Metrics have 4 decimals, latencies 2 decimals (`-` when unknown).
pub fn side_by_side(rows: &[(String, Summary)]) -> String {
    let columns: Vec<(&str, &Summary)> = rows.iter().map(|(l, s)| (l.as_str(), s)).collect();
    render(&columns)
}

fn render(columns: &[(&str, &Summary)]) -> String {
    let names: Vec<&str> = Summary::default().rows().iter().map(|r| r.0).collect();
    let columns: Vec<(&str, Vec<String>)> = columns
        .iter()
        .map(|(l, s)| (*l, s.rows().into_iter().map(|r| r.1).collect()))
        .collect();
    render_table(&names, &columns)
}

/// A plain-text table: one row per name (left-aligned under `metric`), one column per
/// `(label, values)` (right-aligned), columns two spaces apart, the header underlined.
/// Widths count characters, so non-ASCII labels line up.
pub(crate) fn render_table(names: &[&str], columns: &[(&str, Vec<String>)]) -> String {
    const METRIC: &str = "metric";
    let width = |s: &str| s.chars().count();
    let name_width = names
        .iter()
        .map(|n| width(n))
        .chain([width(METRIC)])
        .max()
        .unwrap_or(0);
    let col_widths: Vec<usize> = columns
        .iter()
        .map(|(label, vals)| {
            vals.iter()
                .map(|v| width(v))
                .chain([width(label)])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut lines = Vec::with_capacity(names.len() + 2);
    let mut header = format!("{METRIC:<name_width$}");
    for ((label, _), w) in columns.iter().zip(&col_widths) {
        // `format!` pads by characters.
        header.push_str(&format!("  {label:>w$}"));
    }
    lines.push(header.trim_end().to_string());
    let total = name_width + col_widths.iter().map(|w| w + 2).sum::<usize>();
    lines.push("-".repeat(total));
    for (i, name) in names.iter().enumerate() {
        let mut line = format!("{name:<name_width$}");
        for ((_, vals), w) in columns.iter().zip(&col_widths) {
            let v = vals.get(i).map(String::as_str).unwrap_or("-");
            line.push_str(&format!("  {v:>w$}"));
        }
        lines.push(line.trim_end().to_string());
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The mean, or `None` of nothing.
pub(crate) fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Nearest-rank percentile of `values` (any order; NaNs sort last).
///
/// Definition: with the `n` values sorted ascending, the `p`-th percentile is the value at
/// 1-based rank `ceil(p / 100 × n)`, clamped to `1..=n`. It is always one of the observed
/// values (no interpolation). For example, with `n = 4` the p50 is the 2nd smallest value,
/// with `n = 1` every percentile is that value, and p100 is the maximum. `p ≤ 0` gives the
/// minimum. Returns `None` when `values` is empty.
pub fn percentile_nearest_rank(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    nearest_rank_sorted(&sorted, p)
}

fn nearest_rank_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    // Multiply before dividing so integer percentiles give exact ranks (95 × 20 / 100 = 19).
    let rank = (p * n as f64 / 100.0).ceil();
    let rank = if rank.is_nan() || rank < 1.0 {
        1
    } else {
        (rank as usize).min(n)
    };
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn qrels(pairs: &[(&str, u32)]) -> HashMap<String, u32> {
        pairs.iter().map(|(d, r)| (d.to_string(), *r)).collect()
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn ndcg_binary() {
        // DCG  = 1/log2(2) + 1/log2(4) = 1 + 0.5 = 1.5
        // IDCG = 1/log2(2) + 1/log2(3) = 1 + 0.6309297535714575
        let r = ranked(&["d1", "d2", "d3"]);
        let q = qrels(&[("d1", 1), ("d3", 1)]);
        close(ndcg_at_k(&r, &q, 10), 1.5 / (1.0 + 1.0 / 3f64.log2()));
        close(ndcg_at_k(&r, &q, 10), 0.919_720_789_148_187_6);
    }

    #[test]
    fn ndcg_perfect_and_empty() {
        let q = qrels(&[("a", 2), ("b", 1)]);
        close(ndcg_at_k(&ranked(&["a", "b", "x"]), &q, 10), 1.0);
        close(ndcg_at_k(&ranked(&[]), &q, 10), 0.0);
        close(ndcg_at_k(&ranked(&["a"]), &q, 0), 0.0);
        close(ndcg_at_k(&ranked(&["a"]), &HashMap::new(), 10), 0.0);
    }

    #[test]
    fn ndcg_graded_two_vs_one() {
        // The grade-2 document ranked below the grade-1 one.
        // DCG  = 1/log2(2) + 2/log2(3) = 1 + 1.2618595071429148 = 2.2618595071429148
        // IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.6309297535714575 = 2.6309297535714575
        // nDCG = 0.8597186998521972
        let q = qrels(&[("a", 1), ("b", 2)]);
        let worse = ndcg_at_k(&ranked(&["a", "b"]), &q, 10);
        close(worse, 0.859_718_699_852_197_2);
        // Swapping them is ideal; gains are linear in the grade (not 2^rel - 1).
        close(ndcg_at_k(&ranked(&["b", "a"]), &q, 10), 1.0);
        assert!(worse < 1.0);
    }

    #[test]
    fn ndcg_relevant_beyond_cutoff() {
        // k = 3: "b" at rank 4 is outside the cutoff but still counts in IDCG@3.
        // DCG@3  = 1/log2(3)               = 0.6309297535714575
        // IDCG@3 = 1/log2(2) + 1/log2(3)   = 1.6309297535714575
        // nDCG@3 = 0.38685280723454163
        let r = ranked(&["x", "a", "y", "b"]);
        let q = qrels(&[("a", 1), ("b", 1)]);
        close(ndcg_at_k(&r, &q, 3), 0.386_852_807_234_541_63);
        // With k = 4 both are in: DCG = 1/log2(3) + 1/log2(5).
        close(
            ndcg_at_k(&r, &q, 4),
            (1.0 / 3f64.log2() + 1.0 / 5f64.log2()) / (1.0 + 1.0 / 3f64.log2()),
        );
    }

    #[test]
    fn ndcg_cross_check_pytrec_eval_style() {
        // Hand computation as pytrec_eval's `ndcg_cut_10` (trec_eval gain = rel, discount
        // log2(rank + 1)), for run d3 > d1 > d7 > d2 > d5 and
        // qrels {d1: 3, d2: 2, d5: 1, d6: 2, d3: 0} (d6 relevant but not retrieved,
        // d3 judged non-relevant, d7 unjudged):
        //
        //   rank doc rel  rel / log2(rank+1)
        //   1    d3  0    0
        //   2    d1  3    3 / 1.5849625007211563 = 1.8927892607143724
        //   3    d7  0    0
        //   4    d2  2    2 / 2.321928094887362  = 0.8613531161467861
        //   5    d5  1    1 / 2.584962500721156  = 0.38685280723454163
        //   DCG@10 = 3.1409951840957
        //
        //   ideal grades sorted: 3, 2, 2, 1
        //   IDCG@10 = 3/1 + 2/1.5849625007211563 + 2/2 + 1/2.321928094887362
        //           = 3 + 1.2618595071429148 + 1 + 0.43067655807339306
        //           = 5.692536065216308
        //
        //   nDCG@10 = 3.1409951840957 / 5.692536065216308 = 0.551774314314572
        let r = ranked(&["d3", "d1", "d7", "d2", "d5"]);
        let q = qrels(&[("d1", 3), ("d2", 2), ("d5", 1), ("d6", 2), ("d3", 0)]);
        close(ndcg_at_k(&r, &q, 10), 0.551_774_314_314_572);
        // Recall counts only score > 0: 3 of 4 relevant retrieved.
        close(recall_at_k(&r, &q, 10), 0.75);
        close(mrr_at_k(&r, &q, 10), 0.5);
    }

    #[test]
    fn recall() {
        let q = qrels(&[("a", 1), ("b", 2), ("c", 1), ("z", 0)]);
        let r = ranked(&["a", "x", "b", "y", "z", "c"]);
        close(recall_at_k(&r, &q, 1), 1.0 / 3.0);
        close(recall_at_k(&r, &q, 3), 2.0 / 3.0);
        close(recall_at_k(&r, &q, 5), 2.0 / 3.0);
        close(recall_at_k(&r, &q, 100), 1.0);
        close(recall_at_k(&r, &q, 0), 0.0);
    }

    #[test]
    fn zero_relevant_gives_zero_everywhere() {
        // Defined as 0 (not NaN); such queries should be skipped by the caller.
        let r = ranked(&["a", "b"]);
        for q in [HashMap::new(), qrels(&[("a", 0)])] {
            close(recall_at_k(&r, &q, 10), 0.0);
            close(ndcg_at_k(&r, &q, 10), 0.0);
            close(mrr_at_k(&r, &q, 10), 0.0);
            close(precision_at_k(&r, &q, 10), 0.0);
            close(hit_at_k(&r, &q, 10), 0.0);
            assert_eq!(QueryMetrics::compute(&r, &q), QueryMetrics::default());
        }
    }

    #[test]
    fn precision_divides_by_k() {
        let q = qrels(&[("a", 1), ("b", 1)]);
        let r = ranked(&["a", "x", "b"]);
        close(precision_at_k(&r, &q, 1), 1.0);
        close(precision_at_k(&r, &q, 2), 0.5);
        close(precision_at_k(&r, &q, 3), 2.0 / 3.0);
        // Fewer than k retrieved: still divided by k (trec_eval P_k).
        close(precision_at_k(&r, &q, 10), 0.2);
        close(precision_at_k(&r, &q, 0), 0.0);
    }

    #[test]
    fn mrr() {
        let q = qrels(&[("a", 1), ("b", 3)]);
        close(mrr_at_k(&ranked(&["a", "b"]), &q, 10), 1.0);
        close(mrr_at_k(&ranked(&["x", "y", "b", "a"]), &q, 10), 1.0 / 3.0);
        // First relevant at rank 3 is outside k = 2.
        close(mrr_at_k(&ranked(&["x", "y", "b"]), &q, 2), 0.0);
        close(mrr_at_k(&ranked(&["x", "y"]), &q, 10), 0.0);
    }

    #[test]
    fn hits() {
        let q = qrels(&[("a", 1)]);
        let r = ranked(&["x", "y", "a"]);
        close(hit_at_k(&r, &q, 1), 0.0);
        close(hit_at_k(&r, &q, 2), 0.0);
        close(hit_at_k(&r, &q, 3), 1.0);
        close(hit_at_k(&r, &q, 10), 1.0);
    }

    #[test]
    fn query_metrics_bundle() {
        let q = qrels(&[("a", 1), ("b", 1)]);
        let mut ids: Vec<String> = (0..50).map(|i| format!("x{i}")).collect();
        ids.insert(1, "a".to_string()); // rank 2
        ids.push("b".to_string()); // rank 52
        let m = QueryMetrics::compute(&ids, &q);
        close(m.hit_at_1, 0.0);
        close(m.hit_at_5, 1.0);
        close(m.hit_at_10, 1.0);
        close(m.mrr_at_10, 0.5);
        close(m.recall_at_10, 0.5);
        close(m.recall_at_100, 1.0);
        close(m.precision_at_10, 0.1);
        close(
            m.ndcg_at_10,
            (1.0 / 3f64.log2()) / (1.0 + 1.0 / 3f64.log2()),
        );
        let json = serde_json::to_value(m).unwrap();
        assert_eq!(json["recall_at_100"], 1.0);
    }

    #[test]
    fn percentile_single_value() {
        for p in [0.0, 1.0, 50.0, 95.0, 99.0, 100.0] {
            assert_eq!(percentile_nearest_rank(&[7.5], p), Some(7.5));
        }
        assert_eq!(percentile_nearest_rank(&[], 50.0), None);
    }

    #[test]
    fn percentile_even_counts() {
        // n = 2: p50 -> rank ceil(1) = 1 (the smaller), p95 -> rank ceil(1.9) = 2.
        assert_eq!(percentile_nearest_rank(&[20.0, 10.0], 50.0), Some(10.0));
        assert_eq!(percentile_nearest_rank(&[20.0, 10.0], 95.0), Some(20.0));
        // n = 4: p50 -> rank 2; p75 -> rank 3; p76 -> rank ceil(3.04) = 4.
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(2.0));
        assert_eq!(percentile_nearest_rank(&v, 75.0), Some(3.0));
        assert_eq!(percentile_nearest_rank(&v, 76.0), Some(4.0));
        assert_eq!(percentile_nearest_rank(&v, 100.0), Some(4.0));
        assert_eq!(percentile_nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(percentile_nearest_rank(&v, 250.0), Some(4.0));
    }

    #[test]
    fn percentile_exact_ranks() {
        // 1..=20: p95 is rank 19 exactly (no floating-point drift to rank 20).
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&v, 95.0), Some(19.0));
        // 1..=100: pN is N.
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(50.0));
        assert_eq!(percentile_nearest_rank(&v, 99.0), Some(99.0));
        // n = 3: p50 -> rank ceil(1.5) = 2, the median.
        assert_eq!(percentile_nearest_rank(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
    }

    #[test]
    fn summary_means_and_latency() {
        let a = QueryMetrics {
            ndcg_at_10: 1.0,
            recall_at_10: 1.0,
            hit_at_1: 1.0,
            ..Default::default()
        };
        let b = QueryMetrics {
            ndcg_at_10: 0.5,
            recall_at_100: 1.0,
            ..Default::default()
        };
        let s = Summary::from(&[a, b], &[10.0, 30.0, 20.0, 40.0]);
        assert_eq!(s.queries, 2);
        close(s.ndcg_at_10, 0.75);
        close(s.recall_at_10, 0.5);
        close(s.recall_at_100, 0.5);
        close(s.hit_at_1, 0.5);
        close(s.mrr_at_10, 0.0);
        assert_eq!(s.latency_mean_ms, Some(25.0));
        assert_eq!(s.latency_p50_ms, Some(20.0));
        assert_eq!(s.latency_p95_ms, Some(40.0));
        assert_eq!(s.latency_p99_ms, Some(40.0));
    }

    #[test]
    fn summary_empty() {
        let s = Summary::from(&[], &[]);
        assert_eq!(s, Summary::default());
        assert!(s.table("empty").contains("latency p50 (ms)"));
    }

    fn sample_summary(ndcg: f64) -> Summary {
        let m = QueryMetrics {
            ndcg_at_10: ndcg,
            ..Default::default()
        };
        Summary::from(&[m], &[1.5, 2.25])
    }

    #[test]
    fn table_is_aligned() {
        let t = sample_summary(0.123_456).table("bm25");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + 13);
        assert!(lines[0].starts_with("metric"));
        assert!(lines[0].ends_with("bm25"));
        assert!(lines[1].chars().all(|c| c == '-'));
        assert!(t.contains("nDCG@10"));
        assert!(t.contains("0.1235"));
        // Every row has the same width (values right-aligned under the label).
        let w = lines[0].len();
        assert_eq!(lines[1].len(), w);
        for l in &lines[2..] {
            assert_eq!(l.len(), w, "{l:?}");
        }
        let queries = lines.iter().find(|l| l.starts_with("queries")).unwrap();
        assert!(queries.ends_with(" 1"), "{queries}");
        let p50 = lines.iter().find(|l| l.starts_with("latency p50")).unwrap();
        assert!(p50.ends_with("1.50"), "{p50}");
        assert!(t.ends_with('\n'));
    }

    #[test]
    fn side_by_side_columns() {
        let rows = vec![
            ("bm25".to_string(), sample_summary(0.5)),
            ("hybrid+rerank-long-label".to_string(), sample_summary(0.75)),
            ("none".to_string(), Summary::default()),
        ];
        let t = side_by_side(&rows);
        let lines: Vec<&str> = t.lines().collect();
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(
            header,
            ["metric", "bm25", "hybrid+rerank-long-label", "none"]
        );
        let ndcg: Vec<&str> = lines
            .iter()
            .find(|l| l.starts_with("nDCG@10"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(ndcg, ["nDCG@10", "0.5000", "0.7500", "0.0000"]);
        let p99 = lines.iter().find(|l| l.starts_with("latency p99")).unwrap();
        let p99: Vec<&str> = p99.split_whitespace().skip(3).collect();
        assert_eq!(p99, ["2.25", "2.25", "-"]);
        let w = lines[0].len();
        for l in &lines {
            assert_eq!(l.len(), w, "{l:?}");
        }
        // Header label ends where its column's values end.
        let end = lines[0].find("hybrid+rerank-long-label").unwrap() + 24;
        assert_eq!(&lines[2][end - 6..end], "0.7500");
    }

    #[test]
    fn side_by_side_with_no_configuration() {
        let t = side_by_side(&[]);
        assert!(t.starts_with("metric\n------"));
        assert_eq!(t.lines().count(), 15);
    }
}
