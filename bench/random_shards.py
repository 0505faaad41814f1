"""Writes a train and a val token shard of uniformly random tokens (llm.c format, uint16).

usage: python3 bench/random_shards.py DIR VOCAB TRAIN_TOKENS [VAL_TOKENS]
"""
import os
import random
import struct
import sys

d, vocab, n_train = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n_val = int(sys.argv[4]) if len(sys.argv) > 4 else 20000
os.makedirs(d, exist_ok=True)
random.seed(3)
for split, n in (("train", n_train), ("val", n_val)):
    with open(f"{d}/rand_{split}_000000.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *(random.randrange(vocab) for _ in range(n))))
