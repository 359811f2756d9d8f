#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""vLLM with caching off, vLLM's own prefix caching, Reprise 'strict' and Reprise 'chat' (reprise.vllm), side by
side in one process on one checkpoint and one chat workload: conversations over shared system prompts, turn and
reply lengths drawn at random, `--concurrent` requests per generate call. Per configuration: prompt tokens
computed (prompt length - vLLM's num_cached_tokens), the prefill floor (the prompt tokens no earlier generate call's
prompt + computed reply covers, at least one per prompt), computed / floor, and over `--rounds` rounds of the
configurations in turn (a fresh engine each) the median wall time of the serving loop (engine start excluded), its
engine steps and the time of those that computed prompt tokens, the connector's own time, and the load average around
each run; for Reprise, the computed tokens above the floor by cause. Measures, asserts nothing.

Run in the venv of scripts/fetch-vllm.sh with the package the C++ build assembles:

    PYTHONPATH=build-ci/python/package .deps/vllm/venv/bin/python bench/vllm_side_by_side.py

The checkpoint (`--model`, written at start, random weights): qwen3next-toy (the default: Qwen3-Next, gated delta,
bf16, hidden 256, 4 layers), qwen35-0.8b (Qwen3.5 dense at Qwen3.5-0.8B's layer sizes, 8 of its 24 layers unless
`--layers`), granite-350m (GraniteMoeHybrid at Granite-4.0-H-350M's shape, 32 layers) or granite-toy (the tests'
GraniteMoeHybrid, hidden 256). With Mamba2 layers vLLM 0.32.0's own prefix caching crashes in its CPU chunk scan
(IndexError at mamba_mixer2.py:880): on the Granite checkpoints the 'vllm' configuration is skipped with a printed
reason, and only a gated-delta hybrid runs all four.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
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


def served(convs: list[harness.Conversation], concurrent: int):
    """Each prompt of the run in the order harness.serve sends it, round by round, `concurrent` prompts per generate
    call: (conversation, turn, prompt, covered), covered = the longest prefix an earlier call computed (each earlier
    prompt and its reply but the last token, sampled and never fed back; prompts of one call cannot reuse each
    other)."""
    seen: list[list[int]] = []
    for t in range(max(len(c.turns) for c in convs)):
        live = [c for c in convs if t < len(c.turns)]
        for i in range(0, len(live), concurrent):
            group = []
            for c in live[i:i + concurrent]:
                p = harness.history(c, t)
                yield c, t, p, max((lcp(p, s) for s in seen), default=0)
                group.append(p + c.turns[t].tokens[:-1])
            seen += group


def floor_and_computed(convs: list[harness.Conversation], concurrent: int) -> tuple[int, int, int]:
    """(prompt tokens, computed, floor) over the run: the floor is what no earlier call covered, at least one token
    per prompt."""
    prompts = computed = floor = 0
    for c, t, p, covered in served(convs, concurrent):
        prompts += len(p)
        floor += len(p) - min(covered, len(p) - 1)
        computed += len(p) - c.turns[t].cached_tokens
    return prompts, computed, floor


def instrument(llm) -> dict[str, float]:
    """Times every engine step of an in-process engine: steps, and those that computed prompt tokens (some request
    scheduled more than one token, or a one-token prompt tail: a step with a new request) with their seconds."""
    core = llm.llm_engine.engine_core.engine_core
    stats = {"steps": 0, "step_s": 0.0, "prefill_steps": 0, "prefill_s": 0.0}
    schedule, step = core.scheduler.schedule, core.step_fn
    last = {}

    def timed_schedule(*a, **kw):
        out = schedule(*a, **kw)
        last["prefill"] = bool(out.scheduled_new_reqs) or any(n > 1 for n in out.num_scheduled_tokens.values())
        return out

    def timed_step(*a, **kw):
        t = time.perf_counter()
        last["prefill"] = False
        try:
            return step(*a, **kw)
        finally:
            dt = time.perf_counter() - t
            stats["steps"] += 1
            stats["step_s"] += dt
            if last["prefill"]:
                stats["prefill_steps"] += 1
                stats["prefill_s"] += dt

    core.scheduler.schedule, core.step_fn = timed_schedule, timed_step
    return stats


def record_admissions(llm) -> dict[tuple[int, ...], tuple[int, int]]:
    """prompt -> (KV tokens Reprise matched, tokens it offered with a state to restore) of each admission."""
    conn = harness.connector(llm)
    out: dict[tuple[int, ...], tuple[int, int]] = {}
    admit = conn._admit

    def recorded(request):
        seq = admit(request)
        if seq is not None:
            out[tuple(request.prompt_token_ids)] = (int(seq.plan.kv_matched_tokens), int(seq.plan.usable_tokens))
        return seq

    conn._admit = recorded
    return out


def breakdown(convs: list[harness.Conversation], concurrent: int, admitted: dict) -> dict[str, int]:
    """Computed tokens above the floor, by cause: per prompt, what the floor covers (c), the KV Reprise matched (k),
    what it offered with a state (u) and what vLLM skipped (s): 'no KV' c - k (the reply's last token and prompts of
    one call cannot reuse each other, vLLM's own figure of this is 0), 'no state' k - u (the KV is there but no
    snapshot at a usable position: a branch point met the first time, the last aligned position before it), and 'not
    taken' u - s (vLLM computing part of what was offered; always 0 here)."""
    out = {"no KV": 0, "no state": 0, "not taken": 0, "last token": 0}
    for c, t, p, covered in served(convs, concurrent):
        if covered == len(p):
            out["last token"] += 1
            covered -= 1
        k, u = admitted.get(tuple(p), (0, 0))
        k = min(max(k, u), covered)
        u = min(u, k)
        out["no KV"] += covered - k
        out["no state"] += k - u
        out["not taken"] += u - min(u, c.turns[t].cached_tokens)
    return out


#: --model: (writer, its keyword arguments' default, has Mamba2 layers)
MODELS = {
    "qwen3next-toy": (models.write_qwen3_next, {}, False),
    "qwen35-0.8b": (models.write_qwen3_5_0_8b, {"layers": 8}, False),
    "granite-350m": (models.write_granite_4_h_350m, {"layers": 32}, True),
    "granite-toy": (models.write_granite_hybrid, {}, True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--system-prompts", type=int, default=3)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--configs", default="off,vllm,strict,chat",
                    help="off, vllm, strict, chat (each request passes its system prompt's end as a capture offset, "
                         "reprise.vllm.extra_args) and chat-unmarked (chat without them)")
    ap.add_argument("--rounds", type=int, default=3, help="the configurations run in turn, this many times over")
    ap.add_argument("--profile", action="store_true", help="print the connector's time per hook")
    ap.add_argument("--model", default="qwen3next-toy", choices=sorted(MODELS), help="the checkpoint (see above)")
    ap.add_argument("--layers", type=int, default=None, help="layer count of qwen35-0.8b / granite-350m")
    ap.add_argument("--model-dir", default=None, help="where the checkpoint is written (kept); a temporary folder "
                                                      "if not given")
    args = ap.parse_args()

    from reprise.vllm import connector as rc

    write, kw, mamba2 = MODELS[args.model]
    kw = dict(kw)
    if args.layers is not None:
        if not kw:
            ap.error(f"--layers does not apply to {args.model}")
        kw["layers"] = args.layers
    name = args.model + (f"-{kw['layers']}l" if kw else "")
    model = write(os.path.join(args.model_dir or tempfile.mkdtemp(prefix="reprise-bench-"), name), **kw)
    convs = harness.conversations(args.conversations, args.turns, args.system_prompts, args.seed)
    modes = args.configs.split(",")
    if mamba2 and "vllm" in modes:
        print(f"vllm: skipped on {args.model}: vLLM 0.32.0's own prefix caching crashes on Mamba2 layers in its CPU "
              f"chunk scan (IndexError at mamba_mixer2.py:880)", flush=True)
        modes.remove("vllm")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    counts = {}
    for r in range(args.rounds):
        for mode in modes:
            llm = harness.engine(model, mode.removesuffix("-unmarked"))
            stats = instrument(llm)
            admitted = record_admissions(llm) if mode not in ("off", "vllm") else {}
            rc.profile(reset=True)
            run = harness.fresh(convs)
            load0 = open("/proc/loadavg").read().split()[0]
            start = time.perf_counter()
            harness.serve(llm, run, concurrent=args.concurrent, system_offsets=mode == "chat")
            wall = time.perf_counter() - start
            load1 = open("/proc/loadavg").read().split()[0]
            counts[mode] = floor_and_computed(run, args.concurrent)
            prof = rc.profile(reset=True)
            hooks = sum(v for k, v in prof.items() if not k.endswith(".calls"))
            runs[mode].append({"wall": wall, "load": f"{load0}/{load1}", "hooks": hooks, **stats})
            _, computed, floor = counts[mode]
            print(f"round {r + 1} {mode}: computed {computed} floor {floor} ({computed / floor:.2f}x) in {wall:.1f} s, "
                  f"{stats['steps']} steps ({stats['prefill_steps']} with prefill, {stats['prefill_s']:.1f} s), "
                  f"connector {hooks:.2f} s, load {load0} -> {load1}", flush=True)
            if admitted:
                print(f"    above the floor: {breakdown(run, args.concurrent, admitted)}", flush=True)
                metrics = harness.connector(llm).metrics()
                print("    connector: " + ", ".join(f"{k} {v}" for k, v in sorted(metrics.items())
                                                   if isinstance(v, (int, float))), flush=True)
            if args.profile and prof:
                for k in sorted(k for k in prof if not k.endswith(".calls")):
                    print(f"    {k}: {prof[k]:.3f} s in {int(prof[k + '.calls'])} calls", flush=True)
            del llm
            gc.collect()

    names = {"off": "vLLM, caching off", "vllm": "vLLM prefix caching (align)", "strict": "Reprise strict",
             "chat": "Reprise chat, system prompts' ends marked", "chat-unmarked": "Reprise chat, unmarked"}
    print(f"\n{args.model} ({name}); {args.conversations} conversations x {args.turns} turns over "
          f"{args.system_prompts} system prompts, "
          f"{args.concurrent} concurrent requests, seed {args.seed}; {os.cpu_count()} CPUs; {args.rounds} rounds "
          f"of {', '.join(modes)} in turn, medians\n")
    print("| configuration | prompt tokens | computed | floor | computed / floor | wall s (median) | prefill s | "
          "steps (with prefill) | connector s | load 1-min before/after, per round |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for mode in modes:
        prompts, computed, floor = counts[mode]
        rs = runs[mode]
        med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
        print(f"| {names.get(mode, mode)} | {prompts} | {computed} | {floor} | {computed / floor:.2f}x | "
              f"{med('wall'):.1f} | {med('prefill_s'):.1f} | {med('steps'):.0f} ({med('prefill_steps'):.0f}) | "
              f"{med('hooks'):.2f} | {', '.join(x['load'] for x in rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
