"""Similarity throughput by text length, beside this machine's fp32 GEMM rate.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/similarity_throughput.py [--device cpu]
        [--texts 128] [--repeats 3] [--backends torch-fp32,onnx-int8]
        [--source ../shared/data/alpaca_eval]

Texts are real model outputs (the AlpacaEval files of the shared data folder) cut to target
lengths **in wordpieces**: each text is encoded once with the model's own tokenizer and cut
at the character offset where the target wordpiece lies (outputs are joined when one is
shorter than the target, so long targets are reached without repeating a text). For each
length and backend the script embeds ``--texts`` distinct texts through
:func:`shadoweval.compare.similarity.embed_texts` (chunking and pooling included, exactly as the
compare worker does) and reports texts/s, chunks per text, wordpieces/s, the encoder's
achieved GFLOP/s and its fraction of the fp32 GEMM rate measured in the same run; the median
of ``--repeats`` runs, the backends of one length run round-robin (interleaved). A last row
per length reads the same texts back from a warm embedding cache in a SQLite results
database (:class:`shadoweval.compare.worker.StorageEmbeddingCache`), the path of a rescore.

FLOPs per wordpiece (BERT encoder, multiply-add = 2 FLOPs, per layer): ``2 (4 d² + 2 d f)``
for the projections and feed-forward plus ``4 d s`` for the attention scores and their use
over a chunk of ``s`` wordpieces (d = 384, f = 1,536, 6 layers for all-MiniLM-L6-v2; Kaplan
et al. 2020, "Scaling laws", Table 1). The GEMM rate is ``torch.mm`` of fp32 matrices of the
feed-forward's shape (4,096 × 384 by 384 × 1,536) on the same threads: the hardware bound
the encoder's large matrix products can reach.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LENGTHS = (16, 64, 128, 254, 512, 1024, 2048)
HIDDEN, FFN, LAYERS = 384, 1536, 6


def corpus(source: Path) -> list[str]:
    """Real outputs to cut texts from, longest first."""
    texts: list[str] = []
    for file in sorted(source.glob("*/model_outputs.json")):
        texts += [row["output"] for row in json.loads(file.read_text(encoding="utf-8"))]
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise SystemExit(f"no AlpacaEval outputs under {source}: pass --source")
    return sorted(texts, key=len, reverse=True)


def cut_texts(tokenizer: Any, texts: list[str], tokens: int, count: int) -> list[str]:
    """``count`` distinct texts of exactly ``tokens`` wordpieces each (special tokens excluded).

    ``tokenizer`` is a ``tokenizers.Tokenizer`` without truncation. A text is cut at the
    end offset of its ``tokens``-th wordpiece; a source shorter than that is joined with the
    next ones (blank line between) until it is long enough.
    """
    out: list[str] = []
    i = 0
    while len(out) < count:
        if i > 50 * count + len(texts):
            raise SystemExit(f"cannot cut {count} distinct texts of {tokens} wordpieces")
        text = texts[i % len(texts)]
        i += 1
        encoding = tokenizer.encode(text, add_special_tokens=False)
        while len(encoding.ids) < tokens:
            text = f"{text}\n\n{texts[i % len(texts)]}"
            i += 1
            encoding = tokenizer.encode(text, add_special_tokens=False)
        cut = text[: encoding.offsets[tokens - 1][1]]
        if len(tokenizer.encode(cut, add_special_tokens=False).ids) != tokens:
            continue  # a cut inside a word re-tokenised differently: take the next source
        if cut not in out:
            out.append(cut)
    return out


def flops_per_wordpiece(chunk_len: float) -> float:
    """Forward-pass FLOPs per wordpiece for a chunk of ``chunk_len`` wordpieces (see module doc)."""
    per_layer = 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN) + 4 * HIDDEN * chunk_len
    return LAYERS * per_layer


def gemm_gflops(device: str, repeats: int = 5) -> float:
    """fp32 ``torch.mm`` GFLOP/s on the feed-forward's shape, best of ``repeats``."""
    import torch

    a = torch.randn(4096, HIDDEN, device=device)
    b = torch.randn(HIDDEN, FFN, device=device)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            torch.mm(a, b)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 20 * 2 * 4096 * HIDDEN * FFN / best / 1e9


def make_encoder(backend: str, device: str, batch_size: int) -> Any:
    """The bundled MiniLM on ``backend`` (``torch-fp32`` needs no backend support)."""
    from shadoweval.compare.encoders import MiniLMEncoder

    if backend == "torch-fp32":
        return MiniLMEncoder(device=device, batch_size=batch_size)
    return MiniLMEncoder(device=device, batch_size=batch_size, backend=backend)  # type: ignore[call-arg]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--backends", default="torch-fp32", help="comma-separated")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--source", type=Path, default=Path("../shared/data/alpaca_eval"))
    args = parser.parse_args()

    import tokenizers
    import torch

    from shadoweval.application.database import open_repository
    from shadoweval.compare.similarity import embed_texts
    from shadoweval.compare.worker import StorageEmbeddingCache

    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    t0 = time.perf_counter()
    encoders = {name: make_encoder(name, args.device, args.batch_size) for name in backends}
    load_s = time.perf_counter() - t0
    reference = encoders[backends[0]]
    tokenizer = tokenizers.Tokenizer.from_file(str(reference.model_path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    texts = corpus(args.source)
    gemm = gemm_gflops(args.device)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} "
        f"torch={torch.__version__} threads={torch.get_num_threads()} device={args.device}"
    )
    print(
        f"model load ({', '.join(backends)}): {load_s:.2f} s; texts per length: {args.texts}; "
        f"repeats: {args.repeats}; fp32 GEMM (4096x384 @ 384x1536): {gemm:.1f} GFLOP/s"
    )
    print()
    header = (
        f"{'wordpieces':>10} {'backend':>12} {'chunks/text':>11} {'texts/s':>10} "
        f"{'wordpieces/s':>13} {'GFLOP/s':>8} {'of GEMM':>8} {'s/run':>8}"
    )
    print(header)
    gemms = [gemm]
    with tempfile.TemporaryDirectory() as tmp, open_repository(f"sqlite:///{tmp}/cache.db") as repo:
        cache = StorageEmbeddingCache(repo)
        for tokens in (int(n) for n in args.lengths.split(",")):
            batch = cut_texts(tokenizer, texts, tokens, args.texts)
            counts = reference.count_tokens(batch)
            pieces = [len(reference.split(text)) for text in batch]
            chunks = sum(pieces) / len(batch)
            chunk_len = sum(counts) / sum(pieces)
            runs: dict[str, list[float]] = {name: [] for name in backends}
            for encoder in encoders.values():
                embed_texts(encoder, batch[:8], batch_size=args.batch_size)  # warm-up
            for _ in range(args.repeats):
                for name, encoder in encoders.items():  # interleaved: one run of each in turn
                    start = time.perf_counter()
                    embed_texts(encoder, batch, batch_size=args.batch_size)
                    runs[name].append(time.perf_counter() - start)
            gemms.append(gemm_gflops(args.device, repeats=2))
            embed_texts(reference, batch, batch_size=args.batch_size, cache=cache)  # fill
            cached_runs = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                embed_texts(reference, batch, batch_size=args.batch_size, cache=cache)
                cached_runs.append(time.perf_counter() - start)
            bound = statistics.median(gemms)
            for name in backends:
                wall = statistics.median(runs[name])
                rate = sum(counts) / wall
                gflops = rate * flops_per_wordpiece(chunk_len) / 1e9
                print(
                    f"{statistics.mean(counts):>10.0f} {name:>12} {chunks:>11.2f} "
                    f"{len(batch) / wall:>10.1f} {rate:>13.0f} {gflops:>8.1f} "
                    f"{gflops / bound:>8.0%} {wall:>8.3f}"
                )
            wall = statistics.median(cached_runs)
            print(
                f"{statistics.mean(counts):>10.0f} {'cached':>12} {chunks:>11.2f} "
                f"{len(batch) / wall:>10.1f} {sum(counts) / wall:>13.0f} {'-':>8} {'-':>8} "
                f"{wall:>8.3f}"
            )
    print()
    print(
        f"fp32 GEMM over the run: median {statistics.median(gemms):.1f} GFLOP/s, "
        f"min {min(gemms):.1f}, max {max(gemms):.1f}"
    )


if __name__ == "__main__":
    main()
