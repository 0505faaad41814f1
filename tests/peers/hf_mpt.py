"""Hugging Face transformers as a real client of weft's MPT-style checkpoints, both ways (CTest
label `peers`; run by run_peer.sh with .venv-peers' Python). docs/model-decoders.md.

  from_weft: an MPT-block model weft trains (ALiBi, no biases, a LayerNorm without bias, the exact
             GELU, a tied head; 6 heads, so MPT's interleaved slopes for a head count that is not a
             power of two) writes a checkpoint that MptForCausalLM.from_pretrained loads (Wqkv the
             transpose of weft's c_attn); its logits are weft eval --logits' within 1e-5 of the
             largest logit, the same mean loss, and the same greedy continuation.
  to_weft:   an MptForCausalLM that transformers makes from a config (random weights) and saves with
             save_pretrained loads in weft eval (same logits and loss), weft generate (same greedy
             continuation) and weft train --init-from (its validation loss before the first step is
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
    from transformers import MptForCausalLM
    return hf_gpt2.compare_logits(name, ckpt, data_dir, d, MptForCausalLM)


def compare_greedy(name, model, ckpt):
    model.generation_config.bos_token_id = None
    return hf_gpt2.compare_greedy(name, model, ckpt)


def test_from_weft():
    d = pu.scratch("hf-mpt-from-weft")
    data = pu.prepare_text(d)
    run = os.path.join(d, "run")
    steps = 30
    pu.weft("train", os.path.join(pu.SOURCE_DIR, "configs", "tiny.toml"), "--n_layer", 2, "--n_head", 6,
            "--n_embd", 96, "--n_ctx", CTX, "--model.position", "alibi", "--model.bias", "false",
            "--model.mlp", "gelu_exact", "--seq_len", CTX, "--global_batch", 8, "--micro_batch", 8,
            "--steps", steps, "--lr", 3e-3, "--warmup_steps", 5, "--data", data, "--out", run, "--val_every", 0,
            "--ckpt_every", steps, "--sample_tokens", 0, "--log_every", 10, "--threads", 2)
    ckpt = os.path.join(run, "step-%06d" % steps)
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert cfg["architectures"] == ["MptForCausalLM"] and cfg["attn_config"]["alibi"], cfg
    model, figs = compare_logits("from_weft", ckpt, data, d)
    figs.update(compare_greedy("from_weft", model, ckpt))
    pu.report("hf_mpt_from_weft", steps=steps, **figs)


def make_hf_model(d):
    from transformers import MptConfig, MptForCausalLM
    torch.manual_seed(2468)
    cfg = MptConfig(d_model=64, n_heads=4, n_layers=2, expansion_ratio=4, max_seq_len=CTX, vocab_size=50257,
                    layer_norm_epsilon=1e-5, learned_pos_emb=False, no_bias=True,
                    attn_config={"alibi": True, "alibi_bias_max": 8}, initializer_range=0.1,
                    bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = MptForCausalLM(cfg).eval()
    with torch.no_grad():  # LayerNorm weights start at 1: give them values
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    out = os.path.join(d, "hf-mpt")
    model.save_pretrained(out, safe_serialization=True)
    return out


def test_to_weft():
    d = pu.scratch("hf-mpt-to-weft")
    data = pu.prepare_text(d)
    hf_dir = make_hf_model(d)
    model, figs = compare_logits("to_weft", hf_dir, data, d)
    figs.update(compare_greedy("to_weft", model, hf_dir))
    from transformers import MptForCausalLM
    figs.update(hf_gpt2.check_init_from(hf_dir, data, d, figs["hf_loss"], MptForCausalLM))
    pu.report("hf_mpt_to_weft", **figs)


if __name__ == "__main__":
    sys.exit(pu.main({"mpt_from_weft": test_from_weft, "mpt_to_weft": test_to_weft}))
