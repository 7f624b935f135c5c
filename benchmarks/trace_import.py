"""Records per second of ``shadow-eval import`` with the trace presets.

Usage::

    .venv/bin/python benchmarks/trace_import.py [--records 20000] [--repeats 3]

Writes one synthetic export per preset into a temporary folder — ``otel_genai``: OTLP/JSON
lines of 100 chat spans each (``gen_ai.input.messages``/``gen_ai.output.messages``, usage,
a conversation id); ``langfuse``: JSON Lines of GENERATION observations; ``litellm``: JSON Lines of
``StandardLoggingPayload`` objects — each record a two-message chat (~60 words) with one
e-mail address planted in every tenth prompt. Then times
:func:`shadoweval.application.importing.import_table` end to end (read, map, tag, redact with the
default body rules, hash the session, write the capture log), and again with
``redact=False``, and prints one row per preset with the median and the minimum of
``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from shadoweval.application.importing import ImportRequest, TableSource, import_table

SENTENCE = (
    "the customer asks about an order that arrived late and wants to know whether the "
    "refund was issued and when the replacement ships to the address on file"
)
WORDS = SENTENCE.split(" ")


def _prompt(i: int) -> str:
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(40))
    return text + (" contact me at jo.doe@example.org" if i % 10 == 0 else "")


def _kv(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


def _span(i: int) -> dict[str, Any]:
    start = 1_733_220_000_000_000_000 + i * 1_000_000_000
    inp = [{"role": "user", "parts": [{"type": "text", "content": _prompt(i)}]}]
    out = [{"role": "assistant", "parts": [{"type": "text", "content": _prompt(i + 7)[:120]}],
            "finish_reason": "stop"}]  # fmt: skip
    return {
        "traceId": f"{i:032x}",
        "spanId": f"{i:016x}",
        "name": "chat gpt-4o-mini",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 800_000_000),
        "attributes": [
            _kv("gen_ai.operation.name", {"stringValue": "chat"}),
            _kv("gen_ai.request.model", {"stringValue": "gpt-4o-mini"}),
            _kv("gen_ai.usage.input_tokens", {"intValue": "52"}),
            _kv("gen_ai.usage.output_tokens", {"intValue": "24"}),
            _kv("gen_ai.conversation.id", {"stringValue": f"conv-{i // 5}"}),
            _kv("gen_ai.input.messages", {"stringValue": orjson.dumps(inp).decode()}),
            _kv("gen_ai.output.messages", {"stringValue": orjson.dumps(out).decode()}),
        ],
    }


def _export(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}


def write_otel(path: Path, records: int) -> None:
    with path.open("wb") as fh:
        for first in range(0, records, 100):
            spans = [_span(i) for i in range(first, min(first + 100, records))]
            fh.write(orjson.dumps(_export(spans)) + b"\n")


def write_langfuse(path: Path, records: int) -> None:
    with path.open("wb") as fh:
        for i in range(records):
            second = f"{i % 60:02d}"
            record = {
                "id": f"obs-{i}",
                "traceId": f"trace-{i}",
                "type": "GENERATION",
                "startTime": f"2024-12-03T09:{(i // 60) % 60:02d}:{second}.000Z",
                "endTime": f"2024-12-03T09:{(i // 60) % 60:02d}:{second}.800Z",
                "completionStartTime": f"2024-12-03T09:{(i // 60) % 60:02d}:{second}.300Z",
                "model": "gpt-4o-mini",
                "modelParameters": {"temperature": 0.2, "max_tokens": "inf"},
                "input": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": _prompt(i)}],
                "output": {"role": "assistant", "content": _prompt(i + 7)[:120]},
                "usageDetails": {"input": 52, "output": 24, "total": 76},
                "level": "DEFAULT",
                "sessionId": f"s-{i // 5}",
                "metadata": {"task_type": "support"},
            }  # fmt: skip
            fh.write(orjson.dumps(record) + b"\n")


def write_litellm(path: Path, records: int) -> None:
    with path.open("wb") as fh:
        for i in range(records):
            start = 1_733_230_000.0 + i
            record = {
                "id": f"chatcmpl-{i}",
                "call_type": "acompletion",
                "stream": True,
                "status": "success",
                "prompt_tokens": 52,
                "completion_tokens": 24,
                "startTime": start,
                "endTime": start + 0.8,
                "completionStartTime": start + 0.3,
                "model": "gpt-4o-mini-2024-07-18",
                "model_group": "gpt-4o-mini",
                "metadata": {"user_api_key_hash": "ab" * 32,
                             "requester_metadata": {"session_id": f"s-{i // 5}"}},
                "messages": [{"role": "user", "content": _prompt(i)}],
                "response": {"model": "gpt-4o-mini-2024-07-18", "choices": [
                    {"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": _prompt(i + 7)[:120]}}]},
                "model_parameters": {"temperature": 0.2},
            }  # fmt: skip
            fh.write(orjson.dumps(record) + b"\n")


WRITERS = {"otel_genai": write_otel, "langfuse": write_langfuse, "litellm": write_litellm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.records} records per preset, median/min of {args.repeats} runs")
    print(
        "| preset | file MB | written | redacted | median s | min s | records/s "
        "| without redaction: median s | records/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for preset, write in WRITERS.items():
            path = root / f"{preset}.jsonl"
            write(path, args.records)
            cells = []
            report = None
            for redact in (True, False):
                times = []
                for run in range(args.repeats):
                    out = root / f"{preset}-{redact}-{run}"
                    source = TableSource(path, preset=preset)
                    request = ImportRequest(table=source, out=out, redact=redact)
                    started = time.perf_counter()
                    done = import_table(request)
                    times.append(time.perf_counter() - started)
                    report = report if not redact and report is not None else done
                median = statistics.median(times)
                cells.append((median, min(times), args.records / median))
            assert report is not None
            (med, low, rate), (med_plain, _, rate_plain) = cells
            print(
                f"| `{preset}` | {path.stat().st_size / 1e6:.1f} | {report.written} | "
                f"{report.redacted} | {med:.2f} | {low:.2f} | {rate:,.0f} | "
                f"{med_plain:.2f} | {rate_plain:,.0f} |"
            )


if __name__ == "__main__":
    main()
