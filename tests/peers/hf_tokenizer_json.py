"""Hugging Face `tokenizers` in the peers' environment (CTest label `peers`): GPT-2's own
tokenizer.json, as `transformers` writes it from the vendored vocab.json + merges.txt (50,000
merges), read by `weft prepare --tokenizer tokenizer.json`: every document of a corpus with
multibyte text, special and added tokens comes out of the shards as the separator followed by
exactly the ids Hugging Face's `encode` gives it (issue 36 item 3).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402

DOCS = [
    "Hello world, it's weft! They're here; we've seen it.",
    "Accents: café naïve résumé Straße über, decomposed: cafe\u0301.",
    "CJK 日本語のテキスト 中文 한국어 and emoji 😀🚀 👩‍💻 🇫🇷",
    "Numbers 1 12 123 1234 3.14159, tabs\tand   runs of   spaces\r\nand lines\n\n",
    "A special token in the text: <|endoftext|> is recognised by Hugging Face's encode.",
    "  leading spaces, trailing spaces   ",
    " ".join(["The quick brown fox jumps over the lazy dog."] * 40),
]


def test_gpt2_tokenizer_json_prepare():
    d = pu.scratch("hf-tokenizer-json")
    tok = pu.gpt2_tokenizer()
    tj = os.path.join(d, "gpt2-tokenizer.json")
    tok.backend_tokenizer.save(tj)
    src = os.path.join(d, "docs")
    os.makedirs(src)
    for i, t in enumerate(DOCS):
        with open(os.path.join(src, "doc%02d.txt" % i), "w", encoding="utf-8", newline="") as f:
            f.write(t)
    data = os.path.join(d, "data")
    pu.weft("prepare", "--input", src, "--out", data, "--tokenizer", tj, "--val-fraction", 0.3)
    meta = json.load(open(os.path.join(data, "meta.json")))
    assert meta["vocab_size"] == 50257 and meta["separator"] == "<|endoftext|>" and meta["eot_token"] == 50256, meta
    # How weft prepare reads a text file: as one document (docs/formats-data.md), its bytes as they are.
    want = sorted([50256] + tok.backend_tokenizer.encode(t, add_special_tokens=False).ids for t in DOCS)
    got = []
    for name in sorted(os.listdir(data)):
        if not name.endswith(".bin"):
            continue
        with open(os.path.join(data, name), "rb") as f:
            raw = f.read()
        tokens = np.frombuffer(raw[1024:], dtype=np.uint16).tolist()
        # Documents start at the separators that weft put there: each begins a document's ids.
        starts = [i for i, t in enumerate(tokens) if t == 50256]
        # A separator inside a document (its text's <|endoftext|>) is not a start: rebuild by
        # matching the expected documents greedily from each start.
        i = 0
        while i < len(tokens):
            assert tokens[i] == 50256, (name, i)
            match = [w for w in want if tokens[i:i + len(w)] == w]
            assert match, "shard %s at %d: no expected document starts here: %s" % (name, i, tokens[i:i + 20])
            w = max(match, key=len)
            got.append(w)
            i += len(w)
        assert starts and starts[0] == 0
    assert sorted(got) == want, "documents differ from Hugging Face's encodings"
    pu.report("gpt2_tokenizer_json_prepare", documents=len(DOCS), tokens=sum(len(w) for w in want),
              merges=len(json.load(open(tj))["model"]["merges"]))


if __name__ == "__main__":
    sys.exit(pu.main({"gpt2_tokenizer_json_prepare": test_gpt2_tokenizer_json_prepare}))
