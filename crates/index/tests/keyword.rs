//! The keyword index: BM25 arithmetic, deletes, sessions, persistence.

use neuralcore_index::{AnalyzerConfig, Bm25Params, IndexChunk, KeywordIndex};

fn chunk<'a>(doc: u64, title: &'a str, body: &'a str) -> IndexChunk<'a> {
    IndexChunk {
        doc,
        ordinal: 0,
        title,
        body,
    }
}

fn plain() -> AnalyzerConfig {
    AnalyzerConfig {
        title_in_body: false,
        ..Default::default()
    }
}

#[test]
fn bm25_matches_the_formula() {
    let idx = KeywordIndex::in_memory(&plain()).unwrap();
    // Lengths after analysis (stop words removed): d1 = 3, d2 = 1, d3 = 2 tokens.
    idx.apply(
        &[],
        [
            chunk(1, "", "apple apple banana"),
            chunk(2, "", "cherry"),
            chunk(3, "", "banana cherry"),
        ],
        1,
    )
    .unwrap();
    let p = Bm25Params {
        k1: 1.2,
        b: 0.75,
        title_weight: 0.0,
    };
    let hits = idx.search("apple", 10, &p).unwrap();
    assert_eq!(hits.len(), 1);
    let (n, df, tf, dl, avgdl) = (3.0f64, 1.0, 2.0, 3.0, 2.0);
    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
    let expect = idf * tf * (p.k1 + 1.0) / (tf + p.k1 * (1.0 - p.b + p.b * dl / avgdl));
    assert!(
        (hits[0].score as f64 - expect).abs() < 1e-4,
        "{} vs {expect}",
        hits[0].score
    );
    // b = 0 ignores length; k1 changes saturation.
    let flat = Bm25Params {
        k1: 2.0,
        b: 0.0,
        title_weight: 0.0,
    };
    let s = idx.search("apple", 10, &flat).unwrap()[0].score as f64;
    assert!((s - idf * 2.0 * 3.0 / (2.0 + 2.0)).abs() < 1e-4);
    // Multi-term queries sum; ranking by score, ties by key.
    let hits = idx.search("banana cherry", 10, &p).unwrap();
    assert_eq!(hits[0].doc, 3);
    assert_eq!(hits.len(), 3);
    assert!(
        idx.search("the of and", 10, &p).unwrap().is_empty(),
        "stop words only"
    );
    assert!(idx.search("", 10, &p).unwrap().is_empty());
}

#[test]
fn title_field_and_title_in_body() {
    let idx = KeywordIndex::in_memory(&plain()).unwrap();
    idx.apply(
        &[],
        [
            chunk(1, "Giraffes", "tall animals"),
            chunk(2, "Other", "giraffes mentioned once here and there"),
        ],
        1,
    )
    .unwrap();
    let no_title = Bm25Params {
        title_weight: 0.0,
        ..Default::default()
    };
    assert_eq!(idx.search("giraffes", 10, &no_title).unwrap().len(), 1);
    let heavy = Bm25Params {
        title_weight: 5.0,
        ..Default::default()
    };
    assert_eq!(idx.search("giraffes", 10, &heavy).unwrap()[0].doc, 1);
    let tib = KeywordIndex::in_memory(&AnalyzerConfig::default()).unwrap();
    tib.apply(&[], [chunk(1, "Giraffes", "tall animals")], 1)
        .unwrap();
    assert_eq!(
        tib.search("giraffes", 10, &no_title).unwrap().len(),
        1,
        "title indexed with the body"
    );
}

#[test]
fn deletes_sessions_and_generations() {
    let dir = tempfile::tempdir().unwrap();
    let p = Bm25Params::default();
    {
        let idx = KeywordIndex::open(dir.path(), &AnalyzerConfig::default()).unwrap();
        assert_eq!(idx.generation(), 0);
        idx.apply(
            &[],
            [
                chunk(1, "", "lemurs of madagascar"),
                chunk(2, "", "lemurs again"),
            ],
            4,
        )
        .unwrap();
        idx.apply(&[2], [], 5).unwrap();
        assert_eq!(
            idx.search("lemurs", 10, &p)
                .unwrap()
                .iter()
                .map(|h| h.doc)
                .collect::<Vec<_>>(),
            vec![1]
        );
        // A session dropped without commit leaves nothing.
        {
            let mut s = idx.session().unwrap();
            s.add(chunk(3, "", "lemurs three")).unwrap();
            s.delete_doc(1);
        }
        assert_eq!(idx.search("lemurs", 10, &p).unwrap().len(), 1);
        assert_eq!(idx.generation(), 5);
        idx.close().unwrap();
    }
    let idx = KeywordIndex::open(dir.path(), &AnalyzerConfig::default()).unwrap();
    assert_eq!(
        idx.generation(),
        5,
        "generation persists in the commit payload"
    );
    assert_eq!(idx.num_chunks(), 1);
    drop(idx);
    // Another analyzer: recreated empty, generation 0 (the engine then rebuilds).
    let other = AnalyzerConfig {
        stemmer: "none".into(),
        ..Default::default()
    };
    let idx = KeywordIndex::open(dir.path(), &other).unwrap();
    assert_eq!((idx.generation(), idx.num_chunks()), (0, 0));
}

#[test]
fn deleted_but_unmerged_chunks_never_make_scores_negative() {
    // Regression: N counted live chunks while document frequencies counted deleted
    // ones too, so idf went negative after a changed source was re-indexed.
    let idx = KeywordIndex::in_memory(&plain()).unwrap();
    idx.apply(&[], [chunk(1, "", "apple x"), chunk(2, "", "apple y")], 1)
        .unwrap();
    idx.apply(&[2], [chunk(3, "", "apple z")], 2).unwrap();
    let hits = idx.search("apple", 10, &Bm25Params::default()).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.score > 0.0), "{hits:?}");
    assert!(
        idx.search("apple", usize::MAX, &Bm25Params::default())
            .unwrap()
            .len()
            == 2,
        "huge k is fine"
    );
}
