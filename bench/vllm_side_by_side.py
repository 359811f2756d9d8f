#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""vLLM with caching off, vLLM's own prefix caching, Reprise 'strict' and Reprise 'chat' (reprise.vllm), side by
side in one process on one checkpoint and one chat workload: conversations over shared system prompts, turn and
reply lengths drawn at random, `--concurrent` requests per generate call. Per configuration: prompt tokens
computed (prompt length - vLLM's num_cached_tokens), the prefill floor (the prompt tokens no earlier generate call's
prompt + computed reply covers, at least one per prompt), computed / floor, wall time of the serving loop (engine start
excluded), and the load average around it. Measures, asserts nothing.

Run in the venv of scripts/fetch-vllm.sh with the package the C++ build assembles:

    PYTHONPATH=build-ci/python/package .deps/vllm/venv/bin/python bench/vllm_side_by_side.py

The checkpoint is Qwen3-Next (gated delta, bf16, written at start): with Mamba2 layers vLLM 0.32.0's own prefix
caching crashes in its CPU chunk scan (IndexError at mamba_mixer2.py:880), so only a gated-delta hybrid runs all four.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integrations", "vllm"))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import harness  # noqa: E402
import models  # noqa: E402


def lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def floor_and_computed(convs: list[harness.Conversation], concurrent: int) -> tuple[int, int, int]:
    """(prompt tokens, computed, floor) over the run, served as harness.serve serves it: round by round, `concurrent`
    prompts per generate call. A prompt can reuse what earlier calls computed: each earlier prompt and its reply
    but the last token (sampled, never fed back); prompts of one call cannot reuse each other."""
    prompts = computed = floor = 0
    seen: list[list[int]] = []
    for t in range(max(len(c.turns) for c in convs)):
        live = [c for c in convs if t < len(c.turns)]
        for i in range(0, len(live), concurrent):
            group = []
            for c in live[i:i + concurrent]:
                p = harness.history(c, t)
                covered = min(max((lcp(p, s) for s in seen), default=0), len(p) - 1)
                prompts += len(p)
                floor += len(p) - covered
                computed += len(p) - c.turns[t].cached_tokens
                group.append(p + c.turns[t].tokens[:-1])
            seen += group
    return prompts, computed, floor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--system-prompts", type=int, default=3)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--configs", default="off,vllm,strict,chat")
    args = ap.parse_args()

    model = models.write_qwen3_next(os.path.join(tempfile.mkdtemp(prefix="reprise-bench-"), "qwen3next"))
    convs = harness.conversations(args.conversations, args.turns, args.system_prompts, args.seed)
    rows = []
    for mode in args.configs.split(","):
        llm = harness.engine(model, mode)
        run = harness.fresh(convs)
        load0 = os.getloadavg()[0]
        start = time.perf_counter()
        harness.serve(llm, run, concurrent=args.concurrent)
        wall = time.perf_counter() - start
        load1 = os.getloadavg()[0]
        prompts, computed, floor = floor_and_computed(run, args.concurrent)
        rows.append((mode, prompts, computed, floor, wall, load0, load1))
        print(f"{mode}: computed {computed} floor {floor} ({computed / floor:.2f}x) in {wall:.1f} s", flush=True)
        del llm
        gc.collect()

    names = {"off": "vLLM, caching off", "vllm": "vLLM prefix caching (align)", "strict": "Reprise strict",
             "chat": "Reprise chat"}
    print(f"\n{args.conversations} conversations x {args.turns} turns over {args.system_prompts} system prompts, "
          f"{args.concurrent} concurrent requests, seed {args.seed}; {os.cpu_count()} CPUs\n")
    print("| configuration | prompt tokens | computed | floor | computed / floor | wall s | load avg before / after |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for mode, prompts, computed, floor, wall, l0, l1 in rows:
        print(f"| {names.get(mode, mode)} | {prompts} | {computed} | {floor} | {computed / floor:.2f}x | {wall:.1f} "
              f"| {l0:.2f} / {l1:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
