"""Hugging Face transformers as a real client of weft's GPT-2 checkpoints, both ways (CTest
label `peers`; run by run_peer.sh with .venv-peers' Python).

  from_weft: a checkpoint `weft train` writes loads with GPT2LMHeadModel.from_pretrained and
             gives weft's logits (weft eval --logits) within 1e-5 of the largest logit, the same
             mean loss, and the same greedy continuation of 32 tokens (weft generate --top-k 1);
             its `weft export --dtype bf16` loads as bfloat16, every tensor the checkpoint's
             rounded to bf16, with weft's logits of the export.
  to_weft:   a model transformers makes from a config (random weights) and saves with
             save_pretrained (safetensors) loads in weft eval (same logits and loss), weft
             generate (same greedy continuation) and weft train --init-from (its validation
             loss before the first step is transformers' loss on the same windows).
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402

LOGIT_TOL = 1e-5     # max |weft - HF| / max |HF logit|
LOSS_TOL = 1e-5      # relative
WINDOWS = 4
CTX = 64
PROMPT = "The meaning of life is"
NEW_TOKENS = 32


def shard_windows(path, windows, T):
    """Inputs and targets of windows [0, windows) of an llm.c shard, as weft eval takes them."""
    raw = np.fromfile(path, dtype=np.uint16, offset=256 * 4).astype(np.int64)
    x = np.stack([raw[w * T:(w + 1) * T] for w in range(windows)])
    y = np.stack([raw[w * T + 1:(w + 1) * T + 1] for w in range(windows)])
    return torch.from_numpy(x), torch.from_numpy(y)


def compare_logits(name, ckpt, data_dir, d, model_class=None):
    """weft eval --logits against GPT2LMHeadModel (or model_class: LlamaForCausalLM) on the same
    windows; returns the model and the figures."""
    from transformers import GPT2LMHeadModel
    model_class = model_class or GPT2LMHeadModel
    val = pu.val_shard(data_dir)
    out = os.path.join(d, "logits-%s.safetensors" % name)
    ev = json.loads(pu.weft("eval", "--checkpoint", ckpt, "--data", val, "--windows", WINDOWS,
                            "--batch", WINDOWS, "--logits", out, "--format", "json").strip().splitlines()[-1])
    got = pu.read_safetensors(out)
    wl, ids = got["logits"], got["input_ids"]
    T = wl.shape[1]
    x, y = shard_windows(val, WINDOWS, T)
    assert np.array_equal(ids.astype(np.int64), x.numpy()), "weft's input ids are not the shard's windows"
    model = model_class.from_pretrained(ckpt, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        hl = model(x).logits
        hf_loss = torch.nn.functional.cross_entropy(hl.reshape(-1, hl.shape[-1]), y.reshape(-1)).item()
    hl = hl.numpy()
    assert hl.shape == wl.shape, "logits shape: HF %s, weft %s" % (hl.shape, wl.shape)
    diff = np.abs(hl.astype(np.float64) - wl.astype(np.float64))
    scale = float(np.abs(hl).max())
    figures = dict(tokens=int(x.numel()), logits_compared=int(hl.size), max_abs_diff=float(diff.max()),
                   max_abs_logit=scale, max_rel_diff=float(diff.max() / scale),
                   argmax_agree=float((hl.argmax(-1) == wl.argmax(-1)).mean()),
                   weft_loss=ev["loss"], hf_loss=hf_loss, loss_rel_diff=abs(ev["loss"] - hf_loss) / hf_loss)
    assert figures["max_rel_diff"] <= LOGIT_TOL, "%s: logits differ: %s" % (name, figures)
    assert figures["loss_rel_diff"] <= LOSS_TOL, "%s: loss differs: %s" % (name, figures)
    return model, figures


def compare_greedy(name, model, ckpt):
    """weft generate --top-k 1 against transformers' greedy generate(); both start at <|endoftext|>."""
    tok = pu.gpt2_tokenizer()
    prompt_ids = [pu.EOT] + tok.encode(PROMPT)
    model.generation_config.eos_token_id = None  # weft generate does not stop at <|endoftext|>
    model.generation_config.pad_token_id = pu.EOT
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long))
    hf_new = out[0, len(prompt_ids):].tolist()
    assert len(hf_new) == NEW_TOKENS
    hf_text = tok.decode(hf_new)
    text = pu.weft("generate", "--checkpoint", ckpt, "--prompt", PROMPT, "--tokens", NEW_TOKENS,
                   "--top-k", 1, "--seed", 7)
    assert text.endswith("\n")
    weft_text = text[:-1]
    assert weft_text.startswith(PROMPT), weft_text
    weft_new = weft_text[len(PROMPT):]
    # weft prints decoded text, not ids: transformers' greedy ids must decode to the same bytes.
    assert weft_new == hf_text, "%s: greedy continuations differ\n  weft: %r\n  HF:   %r" % (name, weft_new, hf_text)
    return dict(prompt=PROMPT, new_tokens=NEW_TOKENS, continuation=hf_text)


def train_tiny(d, data, steps):
    """A 2-layer GPT-2 trained by weft for `steps` steps; returns its last checkpoint."""
    run = os.path.join(d, "run-%d" % steps)
    pu.weft("train", os.path.join(pu.SOURCE_DIR, "configs", "tiny.toml"), "--n_layer", 2, "--n_head", 4,
            "--n_embd", 64, "--n_ctx", CTX, "--seq_len", CTX, "--global_batch", 8, "--micro_batch", 8,
            "--steps", steps, "--lr", 3e-3, "--warmup_steps", 5, "--data", data, "--out", run,
            "--val_every", 0, "--ckpt_every", steps, "--sample_tokens", 0, "--log_every", 20, "--threads", 2)
    return os.path.join(run, "step-%06d" % steps)


def test_from_weft():
    d = pu.scratch("hf-from-weft")
    data = pu.prepare_text(d)
    # Trained 40 steps: its loss has fallen (7.9 from 10.8), and its greedy continuation is the
    # degenerate one of a small model (newlines); after one step it is still close to weft's
    # random init, whose greedy continuation varies from token to token. Both are compared.
    for steps in (40, 1):
        ckpt = train_tiny(d, data, steps)
        model, figs = compare_logits("from_weft", ckpt, data, d)
        figs.update(compare_greedy("from_weft", model, ckpt))
        pu.report("hf_from_weft", steps=steps, **figs)
        if steps == 40:
            export_bf16(ckpt, data, d)


def export_bf16(ckpt, data, d):
    """weft export --dtype bf16: transformers loads it as bfloat16 (torch_dtype "auto"), each
    tensor the checkpoint's fp32 weight rounded to bf16, and its logits in fp32 are weft eval's
    of the export."""
    from transformers import GPT2LMHeadModel
    exp = os.path.join(d, "export-bf16")
    pu.weft("export", "--checkpoint", ckpt, "--out", exp, "--dtype", "bf16")
    m16 = GPT2LMHeadModel.from_pretrained(exp, torch_dtype="auto")
    assert m16.dtype == torch.bfloat16, "the bf16 export loads as %s" % m16.dtype
    m32 = GPT2LMHeadModel.from_pretrained(ckpt, torch_dtype=torch.float32)
    w16, w32 = m16.state_dict(), m32.state_dict()
    differ = [n for n in w32 if n in w16 and w32[n].is_floating_point()
              and not torch.equal(w16[n], w32[n].to(torch.bfloat16))]
    assert not differ, "bf16 export: tensors other than the rounded checkpoint: %s" % differ[:5]
    _, figs = compare_logits("from_weft_bf16_export", exp, data, d)
    pu.report("hf_from_weft_bf16_export", tensors=len(w16), **figs)


def make_hf_model(d):
    """A GPT-2 that transformers makes from a config (random weights) and saves itself."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=50257, n_positions=CTX, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     initializer_range=0.1)
    model = GPT2LMHeadModel(cfg).eval()
    # LayerNorm and biases start at 1 and 0: give them values so the check sees every tensor used.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    out = os.path.join(d, "hf-gpt2")
    model.save_pretrained(out, safe_serialization=True)
    assert os.path.exists(os.path.join(out, "model.safetensors"))
    return out


def test_to_weft():
    d = pu.scratch("hf-to-weft")
    data = pu.prepare_text(d)
    hf_dir = make_hf_model(d)
    model, figs = compare_logits("to_weft", hf_dir, data, d)
    figs.update(compare_greedy("to_weft", model, hf_dir))
    from transformers import GPT2LMHeadModel
    figs.update(check_init_from(hf_dir, data, d, figs["hf_loss"], GPT2LMHeadModel))
    pu.report("hf_to_weft", **figs)


def check_init_from(hf_dir, data, d, hf_loss, model_class):
    """weft train --init-from a Hugging Face folder: its validation before the first step (over
    windows [0, 4) of the val split, the windows weft eval scored) is transformers' loss, and the
    fine-tuned checkpoint loads back with model_class. Returns the figures."""
    run = os.path.join(d, "ft")
    pu.weft("train", os.path.join(pu.SOURCE_DIR, "configs", "tiny.toml"), "--init-from", hf_dir,
            "--seq_len", CTX, "--global_batch", WINDOWS, "--micro_batch", WINDOWS, "--steps", 2,
            "--val_every", 1, "--val_batches", 1, "--data", data, "--out", run, "--ckpt_every", 2,
            "--sample_tokens", 0, "--log_every", 1, "--threads", 2)
    lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    v0 = [l["val_loss"] for l in lines if l.get("step") == 0 and "val_loss" in l]
    assert v0, "no validation at step 0 in %s" % lines
    rel = abs(v0[0] - hf_loss) / hf_loss
    assert rel <= LOSS_TOL, "init-from val loss %r vs HF %r (rel %g)" % (v0[0], hf_loss, rel)
    model_class.from_pretrained(os.path.join(run, "step-000002"))
    return dict(init_from_val_loss=v0[0], init_from_rel_diff=rel)


if __name__ == "__main__":
    sys.exit(pu.main({"from_weft": test_from_weft, "to_weft": test_to_weft}))
