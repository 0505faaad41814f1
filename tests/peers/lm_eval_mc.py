"""lm-evaluation-harness in the peers' environment (CTest label `peers`): the reference for the
in-context-learning scores weft will report (issue 36). Its own ARC-Easy task definition
(lm_eval/tasks/arc/arc_easy.yaml: prompt, choices, target, acc and acc_norm) runs zero-shot
on a local copy of twelve questions in ARC's schema and on a small GPT-2 folder that
transformers makes from a config (random weights, GPT-2's vendored tokenizer): no download.
Its per-choice log-likelihoods and both accuracies are recomputed here from the model's logits
with the harness' documented rules (context and continuation tokenised together, the
continuation " " + choice scored token by token; acc_norm divides by the choice's length in
characters), so the scoring weft must reproduce is pinned down.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402

QUESTIONS = [
    ("Which of these is a source of light?", ["the Sun", "a rock", "a shadow", "the Moon's far side"], 0),
    ("What do plants need to make food?", ["sunlight", "darkness", "plastic", "sand only"], 0),
    ("Which state of matter has a fixed shape?", ["gas", "liquid", "solid", "plasma"], 2),
    ("What is the boiling point of water at sea level?", ["0 degrees Celsius", "50 degrees Celsius",
                                                          "100 degrees Celsius", "200 degrees Celsius"], 2),
    ("Which organ pumps blood through the body?", ["the lungs", "the heart", "the stomach", "the skin"], 1),
    ("What force pulls objects toward Earth?", ["magnetism", "friction", "gravity", "electricity"], 2),
    ("Which animal is a mammal?", ["a shark", "a frog", "a whale", "a lizard"], 2),
    ("What gas do humans breathe out?", ["oxygen", "carbon dioxide", "helium", "neon"], 1),
    ("Which tool measures temperature?", ["a ruler", "a scale", "a thermometer", "a compass"], 2),
    ("What causes day and night on Earth?", ["Earth's rotation", "the Moon's orbit", "clouds", "wind"], 0),
    ("Which material conducts electricity best?", ["wood", "rubber", "copper", "glass"], 2),
    ("What is formed when water freezes?", ["steam", "ice", "salt", "air"], 1),
]
LABELS = ["A", "B", "C", "D"]
TASK = "weft_arc_easy_local"


def write_task(d):
    data = os.path.join(d, "arc_local.jsonl")
    with open(data, "w") as f:
        for i, (q, choices, gold) in enumerate(QUESTIONS):
            f.write(json.dumps({"id": "weft-%d" % i, "question": q,
                                "choices": {"text": choices, "label": LABELS},
                                "answerKey": LABELS[gold]}) + "\n")
    import lm_eval
    arc = os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "arc", "arc_easy.yaml")
    assert os.path.exists(arc), arc
    tasks = os.path.join(d, "tasks")
    os.makedirs(tasks, exist_ok=True)
    with open(os.path.join(tasks, TASK + ".yaml"), "w") as f:
        f.write("include: %s\n" % arc)
        f.write("task: %s\n" % TASK)
        f.write("tag: []\n")
        f.write("dataset_path: json\n")
        f.write("dataset_name: null\n")
        f.write("dataset_kwargs:\n  data_files:\n")
        for split in ("train", "validation", "test"):
            f.write("    %s: %s\n" % (split, data))
    return tasks


def make_model(d):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(7)
    cfg = GPT2Config(vocab_size=50257, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     initializer_range=0.2)
    model = GPT2LMHeadModel(cfg).eval()
    out = os.path.join(d, "model")
    model.save_pretrained(out, safe_serialization=True)
    pu.gpt2_tokenizer().save_pretrained(out)
    return out, model


def loglikelihood(model, tok, context, continuation):
    """Sum of log p(continuation | context) and whether it is the greedy continuation."""
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    cont = whole[len(ctx):]
    assert whole[:len(ctx)] == ctx
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), -1)
    rows = logp[len(ctx) - 1:len(whole) - 1]
    ll = rows[torch.arange(len(cont)), torch.tensor(cont)].sum().item()
    greedy = bool((rows.argmax(-1) == torch.tensor(cont)).all())
    return ll, greedy


def test_arc_easy_local():
    import lm_eval
    from lm_eval.tasks import TaskManager
    d = pu.scratch("lm-eval")
    tasks = write_task(d)
    model_dir, model = make_model(d)
    res = lm_eval.simple_evaluate(model="hf", model_args="pretrained=%s,dtype=float32" % model_dir,
                                  tasks=[TASK], task_manager=TaskManager(include_path=tasks), num_fewshot=0,
                                  batch_size=4, device="cpu", log_samples=True)
    r = res["results"][TASK]
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    assert len(samples) == len(QUESTIONS), len(samples)
    tok = pu.gpt2_tokenizer()
    worst = 0.0
    acc = acc_norm = 0
    for s in samples:
        q, choices, gold = QUESTIONS[s["doc_id"]]
        context = "Question: %s\nAnswer:" % q
        mine = [loglikelihood(model, tok, context, " " + c) for c in choices]
        theirs = [resp[0] for resp in s["resps"]]
        for (ll, greedy), (tll, tgreedy) in zip(mine, theirs):
            worst = max(worst, abs(ll - float(tll)))
            assert bool(tgreedy) == greedy
        lls = np.array([m[0] for m in mine])
        acc += int(np.argmax(lls) == gold)
        acc_norm += int(np.argmax(lls / np.array([len(c) for c in choices], dtype=float)) == gold)
        assert s["target"] == gold, (s["target"], gold)
    n = len(QUESTIONS)
    assert worst < 1e-4, "log-likelihoods differ from the harness' by %g" % worst
    assert abs(r["acc,none"] - acc / n) < 1e-12, (r, acc)
    assert abs(r["acc_norm,none"] - acc_norm / n) < 1e-12, (r, acc_norm)
    pu.report("lm_eval_arc_easy_local", questions=n, acc=r["acc,none"], acc_norm=r["acc_norm,none"],
              max_loglik_diff=worst, lm_eval=lm_eval.__version__ if hasattr(lm_eval, "__version__") else None)


# HellaSwag items in hellaswag_val.jsonl's schema (hand-written: no task data ships), with what
# lm-evaluation-harness's preprocess changes: " [title]", a bracketed span, a double space, and
# a ctx_b whose capitalisation capitalize() rewrites.
HELLASWAG = [
    {"activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
     "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                 "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "label": 3},
    {"activity_label": "Making a cake", "ctx_a": "[header] How to bake a cake [title] Preheat the oven.",
     "ctx_b": "THEN mix the flour", "endings": ["and  the sugar in a bowl.", "[step] with a hammer.",
                                                "into the river.", "on the roof of a car."], "label": "0"},
    {"activity_label": "Walking the dog", "ctx_a": "A woman holds a leash.", "ctx_b": "The dog",
     "endings": ["runs ahead of her down the path.", "sings a song about taxes.", "melts into the pavement.",
                 "files a tax return."], "label": 0},
]


def write_hellaswag_task(d):
    import lm_eval
    data = os.path.join(d, "hellaswag_local.jsonl")
    with open(data, "w") as f:
        for i, doc in enumerate(HELLASWAG):
            f.write(json.dumps(dict(doc, ind=i, ctx=doc["ctx_a"] + " " + doc["ctx_b"], split="val")) + "\n")
    hs = os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "hellaswag", "hellaswag.yaml")
    tasks = os.path.join(d, "tasks")
    os.makedirs(tasks, exist_ok=True)
    with open(os.path.join(tasks, "weft_hellaswag_local.yaml"), "w") as f:
        f.write("include: %s\ntask: weft_hellaswag_local\ntag: []\ndataset_path: json\ndataset_name: null\n" % hs)
        f.write("dataset_kwargs:\n  data_files:\n    train: %s\n    validation: %s\n" % (data, data))
    return data


def test_weft_matches_lm_eval():
    """weft eval --tasks on the same model folder and items as lm-evaluation-harness: the same
    per-choice log-likelihoods (1e-4) and the same acc and acc_norm, ARC-Easy (as LLM Foundry's
    multiple_choice JSONL for weft) and HellaSwag (its own JSONL for both)."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    d = pu.scratch("lm-eval-weft")
    tasks = write_task(d)
    hs_data = write_hellaswag_task(d)
    model_dir, _ = make_model(d)
    arc_mc = os.path.join(d, "arc_easy_local.jsonl")
    with open(arc_mc, "w") as f:
        for q, choices, gold in QUESTIONS:
            f.write(json.dumps({"query": "Question: %s\nAnswer:" % q, "choices": choices, "gold": gold}) + "\n")
    res = lm_eval.simple_evaluate(model="hf", model_args="pretrained=%s,dtype=float32" % model_dir,
                                  tasks=[TASK, "weft_hellaswag_local"], task_manager=TaskManager(include_path=tasks),
                                  num_fewshot=0, batch_size=4, device="cpu", log_samples=True)
    out = os.path.join(d, "weft_icl.json")
    pu.weft("eval", "--checkpoint", model_dir, "--tasks", arc_mc, hs_data, "--out", out)
    mine = {t["path"]: t for t in json.load(open(out))["tasks"]}
    figs = {}
    for name, path, n in ((TASK, arc_mc, len(QUESTIONS)), ("weft_hellaswag_local", hs_data, len(HELLASWAG))):
        r = res["results"][name]
        w = mine[path]
        assert w["items"] == n, w
        theirs = sorted(res["samples"][name], key=lambda s: s["doc_id"])
        worst = 0.0
        for s, ws in zip(theirs, w["samples"]):
            assert int(s["target"]) == ws["gold"], (s["target"], ws)
            tll = [float(resp[0][0]) for resp in s["resps"]]
            assert len(tll) == len(ws["loglikelihoods"]), (tll, ws)
            worst = max(worst, max(abs(a - b) for a, b in zip(tll, ws["loglikelihoods"])))
        assert worst < 1e-4, "%s: weft's log-likelihoods differ from the harness' by %g" % (name, worst)
        assert abs(w["acc"] - r["acc,none"]) < 1e-12, (name, w["acc"], r)
        assert abs(w["acc_norm"] - r["acc_norm,none"]) < 1e-12, (name, w["acc_norm"], r)
        figs[name] = {"items": n, "acc": w["acc"], "acc_norm": w["acc_norm"], "max_loglik_diff": worst}
    pu.report("weft_icl_vs_lm_eval", **figs)


if __name__ == "__main__":
    sys.exit(pu.main({"arc_easy_local": test_arc_easy_local, "weft_icl_vs_lm_eval": test_weft_matches_lm_eval}))
