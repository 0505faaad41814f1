"""Hugging Face transformers as a real client of weft's Llama-style checkpoints, both ways (CTest
label `peers`; run by run_peer.sh with .venv-peers' Python). docs/model-decoders.md.

  from_weft: a Llama-block model weft trains (rotary positions, RMSNorm, SwiGLU, 2 kv heads of 4,
             an untied head) writes a checkpoint that LlamaForCausalLM.from_pretrained loads; its
             logits are weft eval --logits' within 1e-5 of the largest logit, the same mean loss,
             and the same greedy continuation (weft generate --top-k 1).
  to_weft:   a LlamaForCausalLM that transformers makes from a config (grouped-query attention,
             untied head, Llama 3.1's rope scaling; random weights) and saves with save_pretrained
             loads in weft eval (same logits and loss), weft generate (same greedy continuation)
             and weft train --init-from (its validation loss before the first step is
             transformers' loss on the same windows); the fine-tuned checkpoint loads back.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402
import hf_gpt2  # noqa: E402

CTX = 64


def compare_logits(name, ckpt, data_dir, d):
    from transformers import LlamaForCausalLM
    return hf_gpt2.compare_logits(name, ckpt, data_dir, d, LlamaForCausalLM)


def compare_greedy(name, model, ckpt):
    model.generation_config.bos_token_id = None
    return hf_gpt2.compare_greedy(name, model, ckpt)


def test_from_weft():
    d = pu.scratch("hf-llama-from-weft")
    data = pu.prepare_text(d)
    run = os.path.join(d, "run")
    steps = 30
    pu.weft("train", os.path.join(pu.SOURCE_DIR, "configs", "tiny.toml"), "--model", "llama-tiny", "--n_layer", 2,
            "--n_head", 4, "--n_embd", 64, "--n_ctx", CTX, "--model.tie_embeddings", "false", "--seq_len", CTX,
            "--global_batch", 8, "--micro_batch", 8, "--steps", steps, "--lr", 3e-3, "--warmup_steps", 5,
            "--data", data, "--out", run, "--val_every", 0, "--ckpt_every", steps, "--sample_tokens", 0,
            "--log_every", 10, "--threads", 2)
    ckpt = os.path.join(run, "step-%06d" % steps)
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_key_value_heads"] == 2, cfg
    model, figs = compare_logits("from_weft", ckpt, data, d)
    figs.update(compare_greedy("from_weft", model, ckpt))
    pu.report("hf_llama_from_weft", steps=steps, **figs)


def make_hf_model(d):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(4321)
    cfg = LlamaConfig(vocab_size=50257, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CTX,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.1,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # RMSNorm weights start at 1: give them values so every tensor counts
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    out = os.path.join(d, "hf-llama")
    model.save_pretrained(out, safe_serialization=True)
    return out


def test_to_weft():
    d = pu.scratch("hf-llama-to-weft")
    data = pu.prepare_text(d)
    hf_dir = make_hf_model(d)
    model, figs = compare_logits("to_weft", hf_dir, data, d)
    figs.update(compare_greedy("to_weft", model, hf_dir))
    from transformers import LlamaForCausalLM
    figs.update(hf_gpt2.check_init_from(hf_dir, data, d, figs["hf_loss"], LlamaForCausalLM))
    pu.report("hf_llama_to_weft", **figs)


if __name__ == "__main__":
    sys.exit(pu.main({"llama_from_weft": test_from_weft, "llama_to_weft": test_to_weft}))
