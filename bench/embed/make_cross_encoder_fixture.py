"""Make a tiny, randomly initialised BERT cross-encoder and its reference scores.

No cross-encoder weights can be fetched here (none ship inside a PyPI, npm or
crates.io package: see bench/embed/README.md), so the Rust cross-encoder is checked
for exactness on a tiny model made by Hugging Face transformers itself: same folder
layout as cross-encoder/ms-marco-MiniLM-L-6-v2 (config.json with
BertForSequenceClassification and num_labels 1, tokenizer.json, model.safetensors),
random weights, and the logits transformers computes for a fixed set of
(query, passage) pairs.

    bench/embed/.venv/bin/python bench/embed/make_cross_encoder_fixture.py

writes crates/models/tests/fixtures/tiny-cross-encoder/ (~60 KB).
"""

import json
import pathlib

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/models/tests/fixtures/tiny-cross-encoder"

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


PAIRS = [
    ("what causes the tides", "The gravitational pull of the moon and the sun causes the tides."),
    ("what causes the tides", "Bread dough rises because yeast makes gas."),
    ("does the drug increase cancer risk", "Patients in the trial who took the drug had a higher risk of cancer."),
    ("does the drug increase cancer risk", "Cats hunt mice and purr."),
    ("", "An empty query still gets a score."),
    ("a", "b"),
    ("mice", " ".join(["the study of mice and the effect of the dose on blood"] * 12)),
]


def main() -> None:
    torch.manual_seed(1234)
    OUT.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.save(str(OUT / "tokenizer.json"))
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        num_labels=1,
        hidden_act="gelu",
    )
    cfg.architectures = ["BertForSequenceClassification"]
    model = BertForSequenceClassification(cfg).eval()
    # Random init draws small weights; widen them so the test is sensitive to mistakes.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0) if p.dim() > 1 else p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(OUT, safe_serialization=True)
    # Pairs are encoded by the tokenizers library from tokenizer.json, exactly as the
    # Rust side does: [CLS] query [SEP] passage [SEP], type ids 0 then 1, the passage
    # cut first when the pair is longer than max_length.
    tok.enable_truncation(max_length=64, strategy="only_second")
    ids, types, logits = [], [], []
    for q, p in PAIRS:
        e = tok.encode(q, p)
        ids.append(e.ids)
        types.append(e.type_ids)
        with torch.no_grad():
            out = model(
                input_ids=torch.tensor([e.ids]),
                token_type_ids=torch.tensor([e.type_ids]),
                attention_mask=torch.ones(1, len(e.ids), dtype=torch.long),
            )
        logits.append(float(out.logits[0, 0]))
    # A padded batch must give the same logits (checks masking on the Python side).
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    batch = tok.encode_batch(PAIRS)
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([b.ids for b in batch]),
            token_type_ids=torch.tensor([b.type_ids for b in batch]),
            attention_mask=torch.tensor([b.attention_mask for b in batch]),
        )
    batched = out.logits[:, 0].tolist()
    assert max(abs(a - b) for a, b in zip(batched, logits)) < 1e-4, (batched, logits)
    (OUT / "reference.json").write_text(json.dumps({
        "note": "tiny random BertForSequenceClassification made by "
                "bench/embed/make_cross_encoder_fixture.py; logits from transformers",
        "max_length": 64,
        "pairs": [{"query": q, "passage": p, "logit": l, "input_ids": i, "token_type_ids": t}
                  for (q, p), l, i, t in zip(PAIRS, logits, ids, types)],
    }, indent=1))
    print(json.dumps(logits))


if __name__ == "__main__":
    main()
