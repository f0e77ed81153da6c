"""Make a tiny, randomly initialised BERT extractive QA reader and its reference output.

No QA weights (deepset/minilm-uncased-squad2 and the like) can be fetched here (none
ship inside a PyPI, npm or crates.io package: see bench/embed/README.md), so the Rust
reader (crates/models/src/qa.rs) is checked for exactness on a tiny model made by
Hugging Face transformers itself: same folder layout as deepset/minilm-uncased-squad2
(config.json with BertForQuestionAnswering, tokenizer.json, model.safetensors), random
weights, and for a fixed set of (question, context) pairs the start and end logits
transformers computes and the best span decoded the SQuAD 2.0 way.

    bench/embed/.venv/bin/python bench/embed/make_qa_fixture.py

writes crates/models/tests/fixtures/tiny-qa/ (~100 KB).

Decoding (the SQuAD 2.0 reference post-processing, one window, no n-best list):
  null score  = start[CLS] + end[CLS]
  best span   = argmax start[i] + end[j] over context tokens i <= j < i + max_answer_len
                (first maximum, i then j ascending), none when the window holds no
                context token
  answer text = context[offset(i).start : offset(j).end] (character offsets here; the
                Rust side works in bytes of the same string)
"""

import json
import pathlib

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForQuestionAnswering

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/models/tests/fixtures/tiny-qa"

MAX_LENGTH = 64
MAX_ANSWER_LENS = [1, 3, 30]

WORDS = """the a an of to in is are was were and or for on with by from at as that this it
be has have had not no what which who how why when where does do did can cause causes caused
tide tides moon sun earth ocean sea water rise fall gravity pull bulge coast high low day
cell cells protein gene genes dna cancer tumor risk increase decrease patients treatment
drug dose blood heart brain mouse mice study trial effect effects disease virus infection
bread dough yeast flour bake oven cat cats dog mouse hunt purr lava volcano rock hot""".split()


def build_tokenizer() -> Tokenizer:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS))
    vocab += ["##s", "##ed", "##ing", "##ly", "##e", "##es", "##er"]
    vocab += list("abcdefghijklmnopqrstuvwxyz0123456789.,?!-")
    vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    ids = {w: i for i, w in enumerate(dict.fromkeys(vocab))}
    tok = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    return tok


LONG = " ".join(["The study of mice and the effect of the dose on blood."] * 12)

PAIRS = [
    ("what causes the tides", "The gravitational pull of the moon and the sun causes the tides."),
    ("does the drug increase cancer risk",
     "Patients in the trial who took the drug had a higher risk of cancer."),
    # Accents and a dash: character and byte offsets differ, the dash is [UNK].
    ("who bakes bread", "Café owners bake bread — with yeast, flour and water — in a hot oven."),
    ("what is lava", "Lava is hot rock from a volcano."),
    ("a", "b"),
    ("is it hot", "no"),
    ("", "An empty question still gets read."),
    # No context token at all: no span.
    ("what", ""),
    # Longer than MAX_LENGTH: the context is cut (only the context).
    ("what do mice study", LONG),
    ("which effect does the dose have on the blood of mice in the study",
     "Naïve mice, " + LONG),
    # A long question leaves the context only a few tokens.
    (" ".join(["what does the dose of the drug do to the blood"] * 4), LONG),
]


def decode(enc, start, end, context, max_answer_len):
    """Best non-null span of one window, as in the SQuAD 2.0 post-processing."""
    ctx = [i for i, s in enumerate(enc.sequence_ids) if s == 1]
    best = None
    for i in ctx:
        for j in ctx:
            if j < i or j >= i + max_answer_len:
                continue
            score = start[i] + end[j]
            if best is None or score > best[0]:
                best = (score, i, j)
    if best is None:
        return None
    score, i, j = best
    a, b = enc.offsets[i][0], enc.offsets[j][1]
    return {"max_answer_len": max_answer_len, "start_token": i, "end_token": j,
            "span_score": score, "char_start": a, "char_end": b, "answer": context[a:b]}


def main() -> None:
    torch.manual_seed(4338)
    OUT.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.save(str(OUT / "tokenizer.json"))
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=MAX_LENGTH,
        type_vocab_size=2,
        hidden_act="gelu",
    )
    cfg.architectures = ["BertForQuestionAnswering"]
    model = BertForQuestionAnswering(cfg).eval()
    # Random init draws small weights; widen them so the test is sensitive to mistakes.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0) if p.dim() > 1 else p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(OUT, safe_serialization=True)
    # Pairs are encoded by the tokenizers library from tokenizer.json, exactly as the
    # Rust side does: [CLS] question [SEP] context [SEP], type ids 0 then 1, only the
    # context cut when the pair is longer than MAX_LENGTH.
    tok.enable_truncation(max_length=MAX_LENGTH, strategy="only_second")
    records, all_start = [], []
    for q, c in PAIRS:
        e = tok.encode(q, c)
        with torch.no_grad():
            out = model(
                input_ids=torch.tensor([e.ids]),
                token_type_ids=torch.tensor([e.type_ids]),
                attention_mask=torch.ones(1, len(e.ids), dtype=torch.long),
            )
        start = out.start_logits[0].tolist()
        end = out.end_logits[0].tolist()
        all_start.append(start)
        records.append({
            "question": q,
            "context": c,
            "input_ids": e.ids,
            "token_type_ids": e.type_ids,
            "truncated": len(e.overflowing) > 0,
            "start_logits": start,
            "end_logits": end,
            "null_score": start[0] + end[0],
            "best": [decode(e, start, end, c, m) for m in MAX_ANSWER_LENS],
        })
    # A padded batch must give the same logits (checks masking on the Python side).
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    batch = tok.encode_batch(PAIRS)
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([b.ids for b in batch]),
            token_type_ids=torch.tensor([b.type_ids for b in batch]),
            attention_mask=torch.tensor([b.attention_mask for b in batch]),
        )
    for row, single in zip(out.start_logits.tolist(), all_start):
        assert max(abs(a - b) for a, b in zip(row, single)) < 1e-4
    assert any(r["truncated"] for r in records)
    # The seed is one where the null score wins for some pairs and a span for others.
    wins = [r["best"][-1] is not None and r["best"][-1]["span_score"] < r["null_score"]
            for r in records]
    assert any(wins) and not all(wins), wins
    (OUT / "reference.json").write_text(json.dumps({
        "note": "tiny random BertForQuestionAnswering made by "
                "bench/embed/make_qa_fixture.py; logits from transformers, spans decoded "
                "the SQuAD 2.0 way (character offsets)",
        "max_length": MAX_LENGTH,
        "max_answer_lens": MAX_ANSWER_LENS,
        "pairs": records,
    }))
    for r in records:
        b = r["best"][-1]
        print(f"{r['question'][:30]!r:34} null {r['null_score']:8.3f}  "
              + (f"span {b['span_score']:8.3f} {b['answer'][:40]!r}" if b else "no span"))


if __name__ == "__main__":
    main()
