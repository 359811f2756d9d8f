#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Writes summary.md for a results folder of scripts/gpu-check.sh (standard library only).

Reads env.txt (where it ran), status/<stage> (`pass|fail|skip SECONDS NOTE`), the stage logs, the device
benchmarks' CSVs (bench_*_gpu.csv, Google Benchmark) and the peer comparison (peers*.csv / .md). A stage
that was not run in this folder is listed as `not run`.
"""
from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

STAGES = ["env", "build", "test", "memcheck", "racecheck", "initcheck", "synccheck", "bench", "peers"]


def read(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""


def env_lines(results: Path) -> dict[str, str]:
    env = {}
    for line in read(results / "env.txt").splitlines():
        key, _, value = line.partition(" ")
        env.setdefault(key, value)
    return env


def stage_table(results: Path) -> list[str]:
    rows = ["| stage | result | seconds | note |", "|---|---|---|---|"]
    for s in STAGES:
        st = read(results / "status" / s).split(maxsplit=2)
        if not st:
            rows.append(f"| {s} | not run | - | - |")
            continue
        result, secs, note = (st + ["-", "-"])[:3]
        rows.append(f"| {s} | {result} | {secs} | {note.strip()} |")
    return rows


def test_section(results: Path) -> list[str]:
    log = read(results / "test.log")
    if not log:
        return []
    out = ["## GPU tests", ""]
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", log)
    if m:
        out.append(f"- ctest: {m.group(0)}")
    skipped = len(re.findall(r"\*\*\*Skipped|Not Run", log))
    if skipped:
        out.append(f"- skipped: {skipped} (exit 77: no CUDA device visible to the test binaries)")
    failed = re.findall(r"^\s*\d+ - (\S+) \(Failed\)", log, re.M)
    if failed:
        out.append("- failed: " + ", ".join(failed))
    return out + [""]


def sanitizer_section(results: Path) -> list[str]:
    out = []
    for tool in ("memcheck", "racecheck", "initcheck", "synccheck"):
        log = read(results / f"{tool}.log")
        if not log:
            continue
        out += [f"## compute-sanitizer {tool}", "", "| binary | exit | sanitizer summary |", "|---|---|---|"]
        summaries = re.findall(r"^========= (?:ERROR|RACECHECK) SUMMARY: (.*)$", log, re.M)
        exits = re.findall(r"^(\S+): exit (\d+)$", log, re.M)
        for i, (binary, code) in enumerate(exits):
            out.append(f"| {binary} | {code} | {summaries[i] if i < len(summaries) else '-'} |")
        out.append("")
    return out


def bench_section(results: Path) -> list[str]:
    out = []
    for f in sorted(results.glob("bench_*_gpu.csv")):
        text = read(f)
        # Google Benchmark writes its context to stderr; the CSV starts at the header line.
        start = text.find("name,")
        if start < 0:
            continue
        rows = list(csv.DictReader(io.StringIO(text[start:])))
        if not rows:
            continue
        fixed = {"name", "iterations", "real_time", "cpu_time", "time_unit", "bytes_per_second", "items_per_second",
                 "label", "error_occurred", "error_message"}
        counters = [c for c in rows[0].keys() if c not in fixed]
        cols = ["name", "real_time", "time_unit"] + counters
        out += [f"## {f.stem} (median of 5 repetitions)", "", "| " + " | ".join(cols) + " |",
                "|" + "---|" * len(cols)]
        for r in rows:
            if r.get("name", "").endswith(("_mean", "_stddev", "_cv")):
                continue
            if r.get("error_occurred") == "true":
                out.append(f"| {r['name']} | error: {r.get('error_message', '')} |")
                continue
            out.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
        out.append("")
    return out


def fmt(v: str) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return v or "-"
    return f"{x:.4g}"


def peers_section(results: Path) -> list[str]:
    out = []
    for table in sorted(results.glob("peers*.csv")):
        md = read(table.with_suffix(".md"))
        rows = list(csv.DictReader(io.StringIO(read(table))))
        passed = sum(r.get("pass") == "1" for r in rows)
        out += [f"## Peer comparison ({table.name})", "", f"{passed} of {len(rows)} cases within tolerance "
                "(throughput_ratio = peer time / Reprise time; goal >= 1.0).", "", md, ""]
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
             f"- toolchain: nvcc {env.get('nvcc', '?')}; {env.get('cmake', '?')}; compute-sanitizer {env.get('compute-sanitizer', '?')}",
             f"- python: {env.get('python', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}",
             f"- kit: {env.get('kit', '?')}", "", "## Stages", ""]
    lines += stage_table(results) + [""]
    lines += test_section(results) + sanitizer_section(results) + bench_section(results) + peers_section(results)
    (results / "summary.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
