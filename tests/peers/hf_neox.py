"""Hugging Face transformers as a real client of weft's GPT-NeoX-style checkpoints, both ways (CTest
label `peers`; run by run_peer.sh with .venv-peers' Python). docs/model-decoders.md.

  from_weft: a NeoX-block model weft trains (rotary positions on a quarter of each head, LayerNorm,
             GELU, the parallel residual, an untied head) writes a checkpoint that
             GPTNeoXForCausalLM.from_pretrained loads (q, k, v interleaved per head in
             query_key_value); its logits are weft eval --logits' within 1e-5 of the largest
             logit, the same mean loss, and the same greedy continuation (weft generate --top-k 1).
  to_weft:   a GPTNeoXForCausalLM that transformers makes from a config (rotary_pct 0.25, the
             tanh GELU, parallel residual, untied head; random weights) and saves with
             save_pretrained loads in weft eval (same logits and loss), weft generate (same greedy
             continuation) and weft train --init-from (its validation loss before the first step
             is transformers' loss on the same windows); the fine-tuned checkpoint loads back.
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
    from transformers import GPTNeoXForCausalLM
    return hf_gpt2.compare_logits(name, ckpt, data_dir, d, GPTNeoXForCausalLM)


def compare_greedy(name, model, ckpt):
    model.generation_config.bos_token_id = None
    return hf_gpt2.compare_greedy(name, model, ckpt)


def test_from_weft():
    d = pu.scratch("hf-neox-from-weft")
    data = pu.prepare_text(d)
    run = os.path.join(d, "run")
    steps = 30
    pu.weft("train", os.path.join(pu.SOURCE_DIR, "configs", "tiny.toml"), "--n_layer", 2, "--n_head", 4,
            "--n_embd", 64, "--n_ctx", CTX, "--model.position", "rope", "--model.rope_fraction", "0.25",
            "--model.parallel_residual", "true", "--model.tie_embeddings", "false", "--seq_len", CTX,
            "--global_batch", 8, "--micro_batch", 8, "--steps", steps, "--lr", 3e-3, "--warmup_steps", 5,
            "--data", data, "--out", run, "--val_every", 0, "--ckpt_every", steps, "--sample_tokens", 0,
            "--log_every", 10, "--threads", 2)
    ckpt = os.path.join(run, "step-%06d" % steps)
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert cfg["architectures"] == ["GPTNeoXForCausalLM"] and cfg["use_parallel_residual"], cfg
    model, figs = compare_logits("from_weft", ckpt, data, d)
    figs.update(compare_greedy("from_weft", model, ckpt))
    pu.report("hf_neox_from_weft", steps=steps, **figs)


def make_hf_model(d):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    torch.manual_seed(4321)
    cfg = GPTNeoXConfig(vocab_size=50257, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=CTX, layer_norm_eps=1e-5,
                        hidden_act="gelu_new", use_parallel_residual=True, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                        initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = GPTNeoXForCausalLM(cfg).eval()
    with torch.no_grad():  # LayerNorm weights start at 1 and biases at 0: give them values
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    out = os.path.join(d, "hf-neox")
    model.save_pretrained(out, safe_serialization=True)
    return out


def test_to_weft():
    d = pu.scratch("hf-neox-to-weft")
    data = pu.prepare_text(d)
    hf_dir = make_hf_model(d)
    model, figs = compare_logits("to_weft", hf_dir, data, d)
    figs.update(compare_greedy("to_weft", model, hf_dir))
    from transformers import GPTNeoXForCausalLM
    figs.update(hf_gpt2.check_init_from(hf_dir, data, d, figs["hf_loss"], GPTNeoXForCausalLM))
    pu.report("hf_neox_to_weft", **figs)


if __name__ == "__main__":
    sys.exit(pu.main({"neox_from_weft": test_from_weft, "neox_to_weft": test_to_weft}))
