"""Embedding backends on real pairs: speed against torch-fp32 and how far the cosines move.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/similarity_backends.py [--limit N]
        [--backends torch-fp32,torch-bf16,onnx-fp32,onnx-int8] [--chunks 8]
        [--cache-dir DIR] [--source ../shared/data/alpaca_eval]

Pairs: the AlpacaEval outputs of Meta-Llama-3-8B-Instruct and Meta-Llama-3.1-8B-Instruct-Turbo
for the same prompts (805; ``--limit`` the first N). Every backend scores the pairs through
:func:`shadoweval.compare.similarity.pairwise_similarity` (splitting and pooling as the compare
worker
does; no embedding cache). Interleaved: the pairs are cut into ``--chunks`` slices and each
slice is scored by every backend in turn, so drift of the machine's speed hits all of them.
Each backend is warmed up on a few pairs first (and an ONNX export, if any, is made then).
Reported: wordpieces/s (distinct texts' wordpieces over the backend's summed seconds), ×
fp32, mean and max |Δcos| of the pair cosines vs torch-fp32, and flips: pairs whose
"changed" call (cosine < 0.9) differs from fp32's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PAIR = ("Meta-Llama-3-8B-Instruct", "Meta-Llama-3.1-8B-Instruct-Turbo")
THRESHOLD = 0.9


def load_pairs(source: Path, limit: int | None) -> list[tuple[str, str]]:
    """``(old, new)`` output pairs in prompt order."""
    old, new = (
        json.loads((source / model / "model_outputs.json").read_text(encoding="utf-8"))
        for model in PAIR
    )
    pairs = [(a["output"], b["output"]) for a, b in zip(old, new, strict=True)]
    return pairs[:limit] if limit else pairs


def main() -> None:
    """Parse the arguments, run the interleaved passes, print the table."""
    import numpy as np
    import torch

    from shadoweval.compare.backends import candidate_backends
    from shadoweval.compare.encoders import MiniLMEncoder
    from shadoweval.compare.similarity import pairwise_similarity

    here = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--backends", default=",".join(candidate_backends("cpu")))
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--source", type=Path, default=here.parent / "shared/data/alpaca_eval")
    args = parser.parse_args()
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    if names[0] != "torch-fp32":
        names = ["torch-fp32", *[n for n in names if n != "torch-fp32"]]
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="backend-bench-"))
    pairs = load_pairs(args.source, args.limit)
    encoders = {n: MiniLMEncoder(backend=n, cache_dir=cache_dir) for n in names}
    for encoder in encoders.values():  # warm-up (and ONNX export) outside the timing
        pairwise_similarity(encoder, pairs[:4])
    texts = sorted({t for pair in pairs for t in pair if t.strip()})
    wordpieces = sum(encoders["torch-fp32"].count_tokens(texts))
    seconds = dict.fromkeys(names, 0.0)
    cosines: dict[str, list[float]] = {n: [] for n in names}
    size = max(1, -(-len(pairs) // args.chunks))
    for start in range(0, len(pairs), size):
        piece = pairs[start : start + size]
        for name in names:
            started = time.perf_counter()
            results = pairwise_similarity(encoders[name], piece)
            seconds[name] += time.perf_counter() - started
            cosines[name] += [r.similarity for r in results]
    reference = np.asarray(cosines["torch-fp32"])
    base_speed = wordpieces / seconds["torch-fp32"]
    print(
        f"# {len(pairs)} pairs ({PAIR[0]} vs {PAIR[1]}), {wordpieces:,} wordpieces of "
        f"{len(texts)} distinct texts; {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print("| backend | wordpieces/s | × fp32 | mean abs Δcos | max abs Δcos | flips at 0.9 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        values = np.asarray(cosines[name])
        delta = np.abs(values - reference)
        flips = int(((values < THRESHOLD) != (reference < THRESHOLD)).sum())
        speed = wordpieces / seconds[name]
        print(
            f"| {name} | {speed:,.0f} | {speed / base_speed:.2f} | {delta.mean():.5f} | "
            f"{delta.max():.5f} | {flips} |"
        )


if __name__ == "__main__":
    main()
