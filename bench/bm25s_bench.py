#!/usr/bin/env python3
"""bm25s side of the keyword-retrieval benchmarks (see bench/run.sh).

    bm25s_bench.py index --corpus corpus.jsonl [--reps 5]
    bm25s_bench.py query --corpus corpus.jsonl --queries queries.jsonl [--reps 5] [--k 10]
                         [--qrels qrels/test.tsv]
    bm25s_bench.py stopwords            # print bm25s's English stop-word list, one a line

Prints one JSON line per measurement, shaped like nc-bench's.

Tokenization: bm25s.tokenize(..., stopwords="en", stemmer=Stemmer("english")) on
"title + ' ' + text" (bm25s's default regex \\b\\w\\w+\\b, lowercased), BM25 with k1 1.2,
b 0.75 (method "lucene", the default), numpy backend (numba is not installed).
Reading the JSON files is not timed, same as in nc-bench.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import bm25s
import Stemmer


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        next(f, None)  # header
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                continue
            out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out


def doc_texts(docs):
    return [(d.get("title") or "") + " " + (d.get("text") or "") for d in docs]


def tokenize(texts, stemmer):
    return bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)


def build(texts, stemmer):
    tokens = tokenize(texts, stemmer)
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(tokens, show_progress=False)
    return retriever


def ndcg_at(ranked, rels, k=10):
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def bench_index(args):
    docs = read_jsonl(args.corpus)
    texts = doc_texts(docs)
    stemmer = Stemmer.Stemmer("english")
    secs = []
    for _ in range(args.reps):
        t = time.perf_counter()
        retriever = build(texts, stemmer)
        secs.append(time.perf_counter() - t)
        del retriever
    med = statistics.median(secs)
    print(json.dumps({
        "bench": "index", "impl": "bm25s", "version": bm25s.__version__,
        "docs": len(docs), "reps": args.reps, "secs": secs,
        "median_secs": med, "docs_per_s": len(docs) / med,
    }), flush=True)


def run_queries(retriever, texts, stemmer, k, mode):
    """All queries, one thread. The timed unit includes query tokenization.

    mode "batch-seq": one bm25s.tokenize call over all queries, then one
      retrieve(..., n_threads=0), which scores the queries one after the other in a
      plain map (no thread pool): the fastest single-thread path bm25s offers here.
    mode "batch-pool1": same, but retrieve(..., n_threads=1), i.e. a one-worker pool.
    mode "per-query": tokenize + retrieve(..., n_threads=0) each query separately (what
      a server answering one query at a time pays: bm25s's per-call Python overhead).
    mode "per-query-pool1": same with retrieve(..., n_threads=1), which builds a
      one-worker thread pool on every call; this is the slow path behind the
      ~2,000-2,300 queries/s figure measured for bm25s earlier, kept for reference.
    The fastest of the modes run is the baseline of the ratio (bench/summarize.py).
    """
    if mode.startswith("per-query"):
        n_threads = 1 if mode == "per-query-pool1" else 0
        out = []
        for q in texts:
            qt = tokenize([q], stemmer)
            res = retriever.retrieve(qt, k=k, n_threads=n_threads, show_progress=False)
            out.append(res.documents[0])
        return out
    qt = tokenize(texts, stemmer)
    n_threads = 0 if mode == "batch-seq" else 1
    res = retriever.retrieve(qt, k=k, n_threads=n_threads, show_progress=False)
    return list(res.documents)


def bench_query(args):
    docs = read_jsonl(args.corpus)
    queries = read_jsonl(args.queries)
    qtexts = [q["text"] for q in queries]
    stemmer = Stemmer.Stemmer("english")
    retriever = build(doc_texts(docs), stemmer)
    modes = args.modes.split(",")
    ranked = None
    for mode in modes:
        # One untimed pass per mode (warm-up); it also yields the rankings for nDCG.
        ranked = run_queries(retriever, qtexts, stemmer, args.k, mode)
        secs = []
        for _ in range(args.reps):
            t = time.perf_counter()
            run_queries(retriever, qtexts, stemmer, args.k, mode)
            secs.append(time.perf_counter() - t)
        med = statistics.median(secs)
        line = {
            "bench": "query", "impl": "bm25s", "version": bm25s.__version__,
            "mode": mode, "docs": len(docs), "queries": len(queries), "k": args.k,
            "reps": args.reps, "threads": 1, "secs": secs, "median_secs": med,
            "queries_per_s": len(queries) / med,
        }
        if args.qrels:
            qrels = read_qrels(args.qrels)
            scores = [
                ndcg_at([docs[int(i)]["_id"] for i in r], qrels[q["_id"]])
                for q, r in zip(queries, ranked)
                if q["_id"] in qrels
            ]
            line["ndcg@10"] = sum(scores) / len(scores) if scores else 0.0
            line["judged_queries"] = len(scores)
        print(json.dumps(line), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cmd", choices=["index", "query", "stopwords"])
    p.add_argument("--corpus")
    p.add_argument("--queries")
    p.add_argument("--qrels")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--modes", default="batch-seq",
                   help="comma-separated: batch-seq, batch-pool1, per-query, per-query-pool1")
    args = p.parse_args()
    if args.cmd == "stopwords":
        from bm25s.stopwords import STOPWORDS_EN
        print("\n".join(STOPWORDS_EN))
        return
    if not args.corpus or (args.cmd == "query" and not args.queries):
        p.error("--corpus (and for query --queries) required")
    for path in (args.corpus, args.queries, args.qrels):
        if path and not os.path.isfile(path):
            print(f"SKIP: {path} is missing; nothing measured.", file=sys.stderr)
            return 0
    args.reps = max(1, args.reps)
    if args.cmd == "index":
        bench_index(args)
    else:
        bench_query(args)


if __name__ == "__main__":
    sys.exit(main())
