"""Similarity throughput (texts/s) by text length, on this machine's CPU (or a GPU).

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/similarity_throughput.py [--device cpu]
        [--texts 256] [--repeats 3] [--source ../shared/data/alpaca_eval]

Texts are real model outputs (the AlpacaEval files of the shared data folder) cut to target
lengths in wordpieces. For each length the script embeds
``--texts`` distinct texts through :func:`compare.similarity.embed_texts` (chunking and
pooling included, exactly as the compare worker does) and reports texts/s, chunks per text
and wordpieces/s; the median of ``--repeats`` runs. One run of the whole table compares
lengths with each other; absolute numbers depend on the machine (record it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LENGTHS = (16, 64, 128, 254, 512, 1024, 2048)


def corpus(source: Path) -> list[str]:
    """Real outputs to cut texts from, longest first."""
    texts: list[str] = []
    for file in sorted(source.glob("*/model_outputs.json")):
        texts += [row["output"] for row in json.loads(file.read_text(encoding="utf-8"))]
    if not texts:
        raise SystemExit(f"no AlpacaEval outputs under {source}: pass --source")
    return sorted(texts, key=len, reverse=True)


def cut_texts(encoder, texts: list[str], tokens: int, count: int) -> list[str]:
    """``count`` distinct texts of about ``tokens`` wordpieces each."""
    out: list[str] = []
    i = 0
    while len(out) < count:
        base = texts[i % len(texts)]
        i += 1
        words = base.split()
        # grow a prefix until it reaches the target wordpiece count
        lo, hi = 1, len(words)
        while lo < hi:
            mid = (lo + hi) // 2
            if encoder.count_tokens([" ".join(words[:mid])])[0] < tokens:
                lo = mid + 1
            else:
                hi = mid
        text = " ".join(words[:lo])
        if encoder.count_tokens([text])[0] < tokens * 0.8:
            text = (text + " ") * (tokens // max(encoder.count_tokens([text])[0], 1) + 1)
            text = " ".join(text.split()[:tokens])
        out.append(f"{len(out)} {text}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--source", type=Path, default=Path("../shared/data/alpaca_eval"))
    args = parser.parse_args()

    import torch

    from compare.encoders import MiniLMEncoder
    from compare.similarity import embed_texts

    t0 = time.perf_counter()
    encoder = MiniLMEncoder(device=args.device, batch_size=args.batch_size)
    load_s = time.perf_counter() - t0
    texts = corpus(args.source)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} "
        f"torch={torch.__version__} threads={torch.get_num_threads()} device={args.device}"
    )
    print(f"model load: {load_s:.2f} s; texts per length: {args.texts}; repeats: {args.repeats}")
    print()
    print(
        f"{'wordpieces':>10} {'chunks/text':>11} {'texts/s':>10} {'wordpieces/s':>13} {'s/run':>8}"
    )
    for tokens in LENGTHS:
        batch = cut_texts(encoder, texts, tokens, args.texts)
        counts = encoder.count_tokens(batch)
        chunks = sum(len(encoder.split(t)) for t in batch) / len(batch)
        embed_texts(encoder, batch[:8], batch_size=args.batch_size)  # warm-up
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            embed_texts(encoder, batch, batch_size=args.batch_size)
            runs.append(time.perf_counter() - start)
        wall = statistics.median(runs)
        print(
            f"{statistics.mean(counts):>10.0f} {chunks:>11.2f} {len(batch) / wall:>10.1f} "
            f"{sum(counts) / wall:>13.0f} {wall:>8.2f}"
        )


if __name__ == "__main__":
    main()
