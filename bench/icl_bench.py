#!/usr/bin/env python3
"""Times `weft eval --tasks` on N four-choice HellaSwag-shaped items with a GPT-2 124M model
(random weights: the time does not depend on them) against lm-evaluation-harness on the same
model folder and items, in the same run, each on THREADS threads; checks that both give the
same acc and acc_norm. Run with the peers' Python (.venv-peers, scripts/setup-peers.sh):

  .venv-peers/bin/python bench/icl_bench.py [--items 1000] [--threads 2] [--fp32-kernel onednn] [--out DIR]

Items are synthetic (no task data ships): contexts of ~40-60 words and four endings of ~10-25
words drawn from a fixed word list, HellaSwag's sizes (its validation contexts average ~40
tokens, endings ~20), in hellaswag_val.jsonl's schema.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("the a man woman dog ball runs jumps over under quickly slowly red blue house car tree river "
         "kitchen knife cuts bread table chair sits stands walks talks camera shows then and while with "
         "he she they it is are was were into onto from near far big small").split()


def sentence(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) + "."


def write_items(path, n, seed=3):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"ind": i, "activity_label": "Activity", "ctx_a": sentence(rng, 30, 45),
                                "ctx_b": sentence(rng, 3, 8), "endings": [sentence(rng, 10, 25) for _ in range(4)],
                                "label": rng.randrange(4), "split": "val"}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weft", default=os.path.join(ROOT, "build", "weft"))
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "icl-bench"))
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--fp32-kernel", default="onednn",
                    help="weft's fp32 products (onednn: what `weft calibrate` picks on AVX-512 machines; openblas)")
    a = ap.parse_args()
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.set_num_threads(a.threads)
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
    import peers_util as pu
    model_dir = os.path.join(a.out, "gpt2-124m")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config()).eval().save_pretrained(model_dir, safe_serialization=True)
    pu.gpt2_tokenizer().save_pretrained(model_dir)
    data = os.path.join(a.out, "hellaswag_synth.jsonl")
    write_items(data, a.items)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    t0 = time.time()
    p = subprocess.run([a.weft, "eval", "--checkpoint", model_dir, "--tasks", data, "--threads", str(a.threads),
                        "--fp32-kernel", a.fp32_kernel, "--format", "json"], capture_output=True, text=True, env=env)
    weft_s = time.time() - t0
    if p.returncode != 0:
        sys.exit("weft eval failed:\n" + p.stderr)
    w = json.loads(p.stdout)["tasks"][0]
    res = {"items": a.items, "threads": a.threads, "weft_seconds": weft_s, "weft_scoring_seconds": w["seconds"],
           "weft_acc": w["acc"], "weft_acc_norm": w["acc_norm"], "requests": w["requests"], "fp32_kernel": a.fp32_kernel,
           "cpu": subprocess.run(["lscpu"], capture_output=True, text=True).stdout.split("Model name:")[1].split("\n")[0].strip(),
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "")}
    if not a.skip_peer:
        import lm_eval
        from lm_eval.tasks import TaskManager
        tasks = os.path.join(a.out, "tasks")
        os.makedirs(tasks)
        hs = os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "hellaswag", "hellaswag.yaml")
        with open(os.path.join(tasks, "synth_hellaswag.yaml"), "w") as f:
            f.write("include: %s\ntask: synth_hellaswag\ntag: []\ndataset_path: json\ndataset_name: null\n" % hs)
            f.write("dataset_kwargs:\n  data_files:\n    train: %s\n    validation: %s\n" % (data, data))
        t0 = time.time()
        r = lm_eval.simple_evaluate(model="hf", model_args="pretrained=%s,dtype=float32" % model_dir,
                                    tasks=["synth_hellaswag"], task_manager=TaskManager(include_path=tasks),
                                    num_fewshot=0, batch_size=16, device="cpu")
        res["lm_eval_seconds"] = time.time() - t0
        res["lm_eval_acc"] = r["results"]["synth_hellaswag"]["acc,none"]
        res["lm_eval_acc_norm"] = r["results"]["synth_hellaswag"]["acc_norm,none"]
        res["weft_over_lm_eval"] = weft_s / res["lm_eval_seconds"]
        res["same_accuracy"] = res["lm_eval_acc"] == w["acc"] and res["lm_eval_acc_norm"] == w["acc_norm"]
    print(json.dumps(res, indent=1))
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
