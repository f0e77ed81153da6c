#!/usr/bin/env python3
"""Generate a seeded pseudo-English corpus for the ingest memory benchmark.

    gen_corpus.py --out DIR --mb 200 [--seed 42]

Layout for --mb M (sizes scale with M, so two sizes differ only in how much there is):
  * one big .txt file of M/10 MB and one big .jsonl file of M/10 MB (BEIR-style lines
    with _id, title, text);
  * the remaining 80 % as ~100 KB files, alternately .txt and .md (markdown gets a
    title and section headings), 100 to a folder.

Words are drawn from a fixed 20,000-word pseudo-vocabulary with Zipf-like weights,
in sentences of 5-28 words and paragraphs of 2-8 sentences. Standard library only.
Prints one JSON line: files, bytes.
"""

import argparse
import itertools
import json
import os
import random
import sys

SMALL_FILE_BYTES = 100 * 1024
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + [
    "th", "ch", "sh", "st", "tr", "pl", "gr", "br", "qu", "ing", "er", "on", "al",
]


class TextGen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        vocab = set()
        while len(vocab) < 20_000:
            n = self.rng.choice((1, 2, 2, 3, 3, 3, 4))
            vocab.add("".join(self.rng.choice(SYLLABLES) for _ in range(n)))
        self.vocab = sorted(vocab)
        self.rng.shuffle(self.vocab)
        weights = [1.0 / (r + 2) ** 1.05 for r in range(len(self.vocab))]
        self.cum = list(itertools.accumulate(weights))

    def words(self, n):
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=n)

    def paragraph(self):
        rng = self.rng
        sentences = []
        for _ in range(rng.randint(2, 8)):
            w = self.words(rng.randint(5, 28))
            if len(w) > 8 and rng.random() < 0.4:
                w[rng.randint(2, len(w) - 3)] += ","
            sentences.append(w[0].capitalize() + " " + " ".join(w[1:]) + ".")
        return " ".join(sentences)

    def title(self):
        return " ".join(self.words(self.rng.randint(3, 8))).capitalize()

    def text(self, target, markdown=False):
        parts = []
        size = 0
        if markdown:
            parts.append("# " + self.title())
            size += len(parts[-1]) + 2
        while size < target:
            if markdown and self.rng.random() < 0.15:
                parts.append("## " + self.title())
                size += len(parts[-1]) + 2
            parts.append(self.paragraph())
            size += len(parts[-1]) + 2
        return "\n\n".join(parts) + "\n"


def write(path, text):
    data = text.encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--mb", type=float, required=True)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    total = int(args.mb * 1024 * 1024)
    big = total // 10
    gen = TextGen(args.seed)
    os.makedirs(args.out, exist_ok=True)
    files = 0
    written = 0

    # One big plain-text file, written in pieces.
    with open(os.path.join(args.out, "big.txt"), "wb") as f:
        size = 0
        while size < big:
            data = gen.text(1024 * 1024).encode("utf-8")
            f.write(data + b"\n")
            size += len(data) + 1
    files += 1
    written += size

    # One big JSONL file: ~4 KB documents.
    with open(os.path.join(args.out, "big.jsonl"), "wb") as f:
        size = 0
        n = 0
        while size < big:
            line = json.dumps(
                {"_id": f"g{n}", "title": gen.title(), "text": gen.text(4096)}
            ).encode("utf-8") + b"\n"
            f.write(line)
            size += len(line)
            n += 1
    files += 1
    written += size

    # Small files until the total is reached.
    i = 0
    while written < total:
        folder = os.path.join(args.out, f"part{i // 100:03d}")
        os.makedirs(folder, exist_ok=True)
        md = i % 2 == 1
        name = f"doc{i:05d}.{'md' if md else 'txt'}"
        written += write(os.path.join(folder, name), gen.text(SMALL_FILE_BYTES, md))
        files += 1
        i += 1
    print(json.dumps({"out": args.out, "files": files, "bytes": written}))


if __name__ == "__main__":
    sys.exit(main())
