# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""mlx-lm's server four ways on one multi-turn chat workload: caching off (its prompt cache holding nothing), its
own LRUPromptCache as it comes (10 entries) and with room for every conversation (`--prompt-cache-size 64`), and
Reprise (`--reprise chat`). The servers run side by side and each request of the workload goes to all of them in
turn, the order rotating, so that load from other processes on the machine falls on every configuration alike.
Measures and asserts nothing.

Workloads: `chat` (conversations over one system prompt, interleaved turn by turn) and `documents` (after the
system prompt each conversation opens with one of a few long documents and its own question, then goes on; the
conversations over one document share its tokens but part at the question).

Per configuration: prompt tokens computed (prompt - cached, mlx-lm's usage), the floor (the prompt tokens no earlier
prompt + reply of that server covers, at least 1), computed / floor, and wall time per request (client side).

    PYTHONPATH=<package with reprise.mlx> .deps/mlx/venv/bin/python bench/mlx_lm_side_by_side.py \\
        [--arch nemotron_h] [--workload chat|documents] [--conversations 12] [--turns 4] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integrations" / "mlx-lm"))

import harness  # noqa: E402
import models  # noqa: E402

WORDS = ["sea", "sky", "fish", "boat", "wind", "rain", "salt", "reef", "tide", "gull", "shell", "sand", "wave",
         "storm", "light", "deep", "blue", "cold", "north", "harbor", "rope", "sail", "map", "star"]
KINDS = ["off", "lru", "lru64", "chat"]
# (harness kind, extra server options) of each configuration
CONFIGS = {"off": ("off", []), "lru": ("lru", []), "lru64": ("lru", ["--prompt-cache-size", "64"]),
           "chat": ("chat", [])}


def text(rng: random.Random, n: int) -> str:
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)[:n]


def common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="nemotron_h", choices=sorted(models.BENCH_SHAPES))
    ap.add_argument("--workload", default="chat", choices=["chat", "documents"])
    ap.add_argument("--real-shape", action="store_true",
                    help="a real model's layer sizes, fewer layers (models.REAL_SHAPES) instead of the small bench shape")
    ap.add_argument("--documents", type=int, default=3)
    ap.add_argument("--document-chars", type=int, default=900)
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-chars", type=int, default=600)
    ap.add_argument("--message-chars", type=int, default=160)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mlx-bench-"))
    shape = (models.REAL_SHAPES if args.real_shape else models.BENCH_SHAPES)[args.arch]
    ckpt = models.write_checkpoint(work / args.arch, args.arch, shape=shape)
    from mlx_lm import load

    _, tok = load(str(ckpt))
    rng = random.Random(1)
    system = text(rng, args.system_chars)
    # Conversations interleaved round robin, turn by turn, as many users of one server would.
    convs = {k: [[{"role": "system", "content": system}] for _ in range(args.conversations)] for k in KINDS}
    firsts = [text(rng, args.message_chars) for _ in range(args.conversations * args.turns)]
    if args.workload == "documents":
        docs = [text(rng, args.document_chars) for _ in range(args.documents)]
        for c in range(args.conversations):   # turn 1: document c mod D, then the conversation's own question
            firsts[c] = docs[c % args.documents] + " " + text(rng, 60)
    servers = {}
    for k in KINDS:
        (work / k).mkdir()
        servers[k] = harness.start(CONFIGS[k][0], ckpt, work / k, CONFIGS[k][1], check_invariants=False)
    stats = {k: {"prompt": 0, "computed": 0, "floor": 0, "wall": 0.0, "requests": 0} for k in KINDS}
    seen = {k: [] for k in KINDS}
    load_before = os.getloadavg()
    t0 = time.time()
    try:
        n = 0
        for turn in range(args.turns):
            for c in range(args.conversations):
                message = firsts[turn * args.conversations + c]
                order = KINDS[n % len(KINDS):] + KINDS[:n % len(KINDS)]
                n += 1
                for k in order:
                    msgs = convs[k][c] + [{"role": "user", "content": message}]
                    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True)
                    covered = max((common(prompt, s) for s in seen[k]), default=0)
                    tic = time.perf_counter()
                    r = servers[k].chat(msgs, max_tokens=args.max_tokens)
                    dt = time.perf_counter() - tic
                    s = stats[k]
                    s["prompt"] += r["prompt_tokens"]
                    s["computed"] += r["prompt_tokens"] - r["cached"]
                    s["floor"] += max(1, len(prompt) - covered)
                    s["wall"] += dt
                    s["requests"] += 1
                    seen[k].append(prompt + r["ids"])
                    convs[k][c] = msgs + [{"role": "assistant", "content": r["text"]}]
        reprise_metrics = servers["chat"].metrics()
        # What each prompt cache held at its last request: mlx-lm logs it before each request (its nbytes; for
        # Reprise the bytes of the KV blocks and snapshots in its pools).
        held = {}
        for k, s in servers.items():
            found = re.findall(r"Prompt Cache: (\d+) sequences, ([\d.]+) GB", s.log.read_text())
            held[k] = f"{found[-1][1]} GB, {found[-1][0]} entries" if found else "-"
    finally:
        for s in servers.values():
            s.close()
    elapsed = time.time() - t0
    load_after = os.getloadavg()

    lines = [f"# mlx-lm side by side: {args.arch}, {args.workload} workload (random weights, "
             f"{shape['num_hidden_layers']} layers, hidden {shape['hidden_size']})", "",
             "Command: `PYTHONPATH=<package> .deps/mlx/venv/bin/python bench/mlx_lm_side_by_side.py "
             f"--arch {args.arch} --workload {args.workload} --conversations {args.conversations} --turns "
             f"{args.turns}{' --real-shape' if args.real_shape else ''}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, mlx-lm 0.32.2 (mlx-cpu 0.32.4); load average "
             f"{load_before[0]:.2f} before, {load_after[0]:.2f} after ({elapsed:.0f} s; other processes share the "
             "machine, which is why configurations alternate request by request).", "",
             f"Workload: {args.conversations} conversations over one {args.system_chars}-character system prompt "
             f"(1 token per character), {args.turns} turns each, interleaved round robin; user messages of "
             f"{args.message_chars} characters, greedy replies of up to {args.max_tokens} tokens; "
             f"{stats['off']['requests']} requests per configuration." +
             (f" Documents: each conversation's first message is one of {args.documents} documents of "
              f"{args.document_chars} characters (conversation c: document c mod {args.documents}) and a 60-character "
              "question." if args.workload == "documents" else ""), "",
             "| configuration | prompt tokens | computed | floor | computed / floor | wall s / request | cache held "
             "(log) |",
             "|---|---|---|---|---|---|---|"]
    names = {"off": "caching off (`--prompt-cache-size 0`)", "lru": "mlx-lm's LRUPromptCache (default, 10 entries)",
             "lru64": "mlx-lm's LRUPromptCache, `--prompt-cache-size 64`", "chat": "Reprise `--reprise chat`"}
    for k in KINDS:
        s = stats[k]
        lines.append(f"| {names[k]} | {s['prompt']} | {s['computed']} | {s['floor']} | "
                     f"{s['computed'] / s['floor']:.2f} | {s['wall'] / s['requests']:.3f} | {held[k]} |")
    lines += ["", f"Reprise: {reprise_metrics['restores']} restores, {reprise_metrics['captures']} prefill captures, "
              f"{reprise_metrics['turn_end_captures']} turn-end captures, restore copies "
              f"{reprise_metrics['restore_copy_s'] * 1e3 / max(1, reprise_metrics['restores']):.2f} ms each on "
              f"average (KV blocks + snapshot into a fresh mlx-lm cache). Reprise's entries: cached KV blocks + "
              "snapshots; mlx-lm's: whole prompt caches (each a copy of every layer's cache for its tokens)."]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
