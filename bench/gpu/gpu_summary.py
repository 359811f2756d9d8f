#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Writes summary.md for a results folder of scripts/gpu-check.sh (standard library only).

Reads env.txt (where it ran, the prebuilt programs, and a `stage NAME RESULT SECONDS NOTE` line per stage), the
logs (test.log: the GPU tests and the demo; sanitizer.log; bench.log: the benchmarks' and the peer
comparison's output), the device benchmarks' CSVs (bench_*_gpu.csv, Google Benchmark) and the peer comparison
(peers*.csv). A stage that was not run in this folder is listed as `not run`.
"""
from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

STAGES = ["build", "env", "test", "demo", "memcheck", "racecheck", "initcheck", "synccheck", "bench", "peers"]
SANITIZERS = ("memcheck", "racecheck", "initcheck", "synccheck")


def read(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""


def env_lines(results: Path) -> dict[str, str]:
    env = {}
    for line in read(results / "env.txt").splitlines():
        key, _, value = line.partition(" ")
        if key == "prebuilt":  # several lines: keyed by their first word
            sub, _, value = value.partition(" ")
            key = f"prebuilt {sub}"
        env.setdefault(key, value)
    return env


def stage_status(results: Path) -> dict[str, list[str]]:
    st = {}
    for line in read(results / "env.txt").splitlines():
        if line.startswith("stage "):
            parts = line.split(maxsplit=4)[1:]
            st[parts[0]] = (parts[1:] + ["-", "-", "-"])[:3]
    return st


def stage_table(results: Path) -> list[str]:
    rows = ["| stage | result | seconds | note |", "|---|---|---|---|"]
    status = stage_status(results)
    for s in STAGES:
        if s not in status:
            rows.append(f"| {s} | not run | - | - |")
            continue
        result, secs, note = status[s]
        rows.append(f"| {s} | {result} | {secs} | {note.strip()} |")
    return rows


def test_section(results: Path) -> list[str]:
    """One row per test binary: its exit status and doctest's counts (exit 77: no CUDA device)."""
    log = read(results / "test.log")
    if not log:
        return []
    out = ["## GPU tests", "", "| binary | exit | doctest test cases | assertions |", "|---|---|---|---|"]
    # Each binary's output ends with its `NAME: exit N` line; doctest's counts come just before it.
    pos = 0
    for m in re.finditer(r"^(\S+): exit (\d+)$", log, re.M):
        chunk = log[pos:m.start()]
        pos = m.end()
        cases = re.findall(r"\[doctest\] test cases:\s*(.*)$", chunk, re.M)
        asserts = re.findall(r"\[doctest\] assertions:\s*(.*)$", chunk, re.M)
        note = " (no CUDA device)" if m.group(2) == "77" else ""
        out.append(f"| {m.group(1)} | {m.group(2)}{note} | {squeeze(cases[-1]) if cases else '-'} | "
                   f"{squeeze(asserts[-1]) if asserts else '-'} |")
    demo = re.search(r"^reprise-demo --device gpu: exit (\d+)$", log, re.M)
    if demo:
        out += ["", f"reprise-demo --device gpu: exit {demo.group(1)}"]
    return out + [""]


def squeeze(s: str) -> str:
    """doctest's `2 | 2 passed | 0 failed |` as a table cell: `2, 2 passed, 0 failed`."""
    return ", ".join(p.strip() for p in re.sub(r"\s+", " ", s).split("|") if p.strip())


def sanitizer_section(results: Path) -> list[str]:
    """One row per sanitizer run: `TOOL BINARY: exit N` and the sanitizer's own summary line before it."""
    log = read(results / "sanitizer.log")
    rows = []
    pos = 0
    for m in re.finditer(r"^(\S+) (\S+): exit (\d+)$", log, re.M):
        if m.group(1) not in SANITIZERS:
            continue
        summaries = re.findall(r"^========= (?:ERROR|RACECHECK) SUMMARY: (.*)$", log[pos:m.start()], re.M)
        pos = m.end()
        rows.append(f"| {m.group(1)} | {m.group(2)} | {m.group(3)} | {summaries[-1] if summaries else '-'} |")
    if not rows:
        return []
    return ["## compute-sanitizer", "", "| tool | binary | exit | sanitizer summary |", "|---|---|---|---|"] + rows + [""]


def bench_section(results: Path) -> list[str]:
    """The benchmarks' medians. Rows that count bytes also get `vs_memcpy_d2d`: their bandwidth over the
    device-to-device cudaMemcpyAsync of the same run (the `memcpy_d2d` row), the goals' measure."""
    out = []
    # The copies and the Mamba2 decode against the memcpy floor first.
    for f in sorted(results.glob("bench_*_gpu.csv"), key=lambda f: (f.name != "bench_state_kernels_gpu.csv", f.name)):
        text = read(f)
        # Google Benchmark writes its context to stderr; the CSV starts at the header line.
        start = text.find("name,")
        if start < 0:
            continue
        rows = list(csv.DictReader(io.StringIO(text[start:])))
        if not rows:
            continue
        rows = [r for r in rows if not r.get("name", "").endswith(("_mean", "_stddev", "_cv"))]
        fixed = {"name", "iterations", "real_time", "cpu_time", "time_unit", "bytes_per_second", "items_per_second",
                 "label", "error_occurred", "error_message"}
        counters = [c for c in rows[0].keys() if c not in fixed]
        floor = next((number(r.get("bytes_per_second")) for r in rows if r.get("name", "").startswith("memcpy_d2d")
                      and r.get("error_occurred") != "true"), None)
        cols = ["name", "real_time", "time_unit", "bytes_per_second", "items_per_second"] + counters
        if floor:
            cols.append("vs_memcpy_d2d")
        out += [f"## {f.stem} (median of the repetitions)", "", "| " + " | ".join(cols) + " |",
                "|" + "---|" * len(cols)]
        for r in rows:
            if r.get("error_occurred") == "true":
                out.append(f"| {r['name']} | error: {r.get('error_message', '')} |")
                continue
            bw = number(r.get("bytes_per_second"))
            if floor:
                r["vs_memcpy_d2d"] = f"{bw / floor}" if bw else ""
            out.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
        out.append("")
    return out


def number(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x and x > 0 else None


def fmt(v: str) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return v or "-"
    return f"{x:.4g}"


def peers_section(results: Path) -> list[str]:
    out = []
    versions = re.findall(r"^# device: (.*)$", read(results / "bench.log"), re.M)
    for table in sorted(results.glob("peers*.csv")):
        rows = list(csv.DictReader(io.StringIO(read(table))))
        if not rows:
            out += [f"## Peer comparison ({table.name})", "", "no case finished", ""]
            continue
        cols = list(rows[0].keys())
        passed = sum(r.get("pass") == "1" for r in rows)
        out += [f"## Peer comparison ({table.name})", ""]
        out += [f"- {v}" for v in dict.fromkeys(versions)] + ([""] if versions else [])
        out += [f"{passed} of {len(rows)} cases within tolerance (throughput_ratio = peer time / Reprise time; "
                "goal >= 1.0).", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
        out.append("")
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: gpu_summary.py RESULTS_DIR", file=sys.stderr)
        return 2
    results = Path(sys.argv[1])
    env = env_lines(results)
    lines = ["# Reprise device check", "",
             f"- device: {env.get('gpu', 'unknown')}",
             f"- commit: {env.get('commit', 'unknown')}",
             f"- date: {env.get('date', 'unknown')}",
             f"- host: {env.get('host', '?')}; compute-sanitizer {env.get('compute-sanitizer', '?')}",
             f"- python: {env.get('python', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}",
             f"- kit: {env.get('kit', '?')}",
             f"- prebuilt programs: {env.get('prebuilt kernels', 'none')}; {env.get('prebuilt nvcc', '?')}; "
             f"commit {env.get('prebuilt commit', '?')}",
             f"- prebuilt from this tree's sources: {env.get('prebuilt-match', '?')}", "", "## Stages", ""]
    lines += stage_table(results) + [""]
    lines += test_section(results) + sanitizer_section(results) + bench_section(results) + peers_section(results)
    (results / "summary.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
