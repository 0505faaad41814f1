#!/usr/bin/env python3
"""Makes the tokenizer.json test files and their reference encodings (issue 36 item 3) with
Hugging Face `tokenizers` (the peers' Python: .venv-peers/bin/python this_file). Three small
byte-level BPEs trained on train.txt, each exercising what weft's reader must follow:
  bytelevel.json  ByteLevel pre-tokenizer with GPT-2's regex; special <|endoftext|>, an added
                  non-special token "<sep>"
  llama3.json     Split with Llama 3's regex (isolated) + ByteLevel without regex,
                  ignore_merges, special <|begin_of_text|> <|end_of_text|> <|eot_id|>, a
                  template post-processor that puts <|begin_of_text|> first
  nfc.json        NFC normaliser, ByteLevel with add_prefix_space, merges as pairs, an added
                  non-special "  " (two spaces, as GPT-NeoX's tokenizer has)
and reference.json: for each file, the ids of every line of corpus.txt (no special tokens
added: weft prepare adds the document separator itself) and of the whole corpus.
Run again only to change the files; the tests compare against what is committed.
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(tok, special, vocab=420):
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([os.path.join(HERE, "train.txt")], trainer)
    return tok


def bytelevel():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    train(tok, ["<|endoftext|>"])
    tok.add_tokens(["<sep>"])
    return tok


def llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    train(tok, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], vocab=450)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    return tok


def nfc():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    train(tok, ["<|endoftext|>"], vocab=380)
    tok.add_tokens(["  "])
    return tok


def main():
    lines = open(os.path.join(HERE, "corpus.txt"), encoding="utf-8", newline="").read().split("\n")
    whole = "\n".join(lines)
    ref = {}
    for name, make in (("bytelevel", bytelevel), ("llama3", llama3), ("nfc", nfc)):
        tok = make()
        path = os.path.join(HERE, name + ".json")
        tok.save(path, pretty=False)
        tok = Tokenizer.from_file(path)
        ref[name] = {"lines": [tok.encode(l, add_special_tokens=False).ids for l in lines],
                     "whole": tok.encode(whole, add_special_tokens=False).ids,
                     "vocab_size": tok.get_vocab_size(with_added_tokens=True)}
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(ref, f)
    print({k: (v["vocab_size"], len(v["whole"])) for k, v in ref.items()})


if __name__ == "__main__":
    main()
