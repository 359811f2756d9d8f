#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""llama-server side by side, one build, one GGUF, one workload: its own caching at its defaults, caching off,
Reprise chat, Reprise strict. Measures; asserts nothing about time.

The workload: conversations over a few shared system prompts, turn lengths and reply lengths (30-500 tokens)
drawn at random from a seed, served by 4 client threads over 4 slots. Every user message starts with the
tokens of "<user>", and every request names that delimiter (llama-server's message_delimiters), so both
llama.cpp's context checkpoints and Reprise know where a user message starts. Per configuration it reports the
prompt tokens the server computed (the sum of timings.prompt_n), their prefill time (timings.prompt_ms), the
decode time per generated token (timings.predicted_ms / predicted_n), the prefill floor (prompt tokens no
earlier prompt or reply of the run covers), computed / floor, wall time, the machine's load average, and the
state the cache holds at the end (Reprise: snapshot bytes and cached KV cells, from its log line; llama.cpp:
context checkpoints and the host prompt cache, from its log). With --rounds R the configurations run in turn R
times (the shared machine's load drifts: compare within a round).

Usage: llama_side_by_side.py --server BIN --model GGUF [--configs default,chat,strict --rounds 2
       --conversations 16 --turns 4 --seed 1 --server-args '...' --out FILE.md]
"""
import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

CONFIGS = {
    # -lv 4: llama.cpp logs its context checkpoints and host prompt cache at trace level
    "default": ("llama.cpp default caching", ["-lv", "4"]),
    "off": ("caching off", ["--cache-ram", "0", "--ctx-checkpoints", "0"]),
    "chat": ("Reprise chat", ["--reprise", "chat", "--reprise-snapshot-bytes", "256M"]),
    "strict": ("Reprise strict", ["--reprise", "strict", "--reprise-snapshot-bytes", "256M"]),
}
USER_DELIMITER = "<user>"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload(args, delimiter):
    """Random tokens (never the delimiter's, which only start a user message)."""
    rng = random.Random(args.seed)
    free = [t for t in range(4, args.vocab) if t not in delimiter]
    span = lambda r: rng.randrange(r[0], r[1] + 1)  # noqa: E731
    systems = [[rng.choice(free) for _ in range(span(args.system_tokens))] for _ in range(3)]
    convs = []
    for c in range(args.conversations):
        convs.append({"system": c % len(systems),
                      "turns": [(list(delimiter) + [rng.choice(free) for _ in range(span(args.user_tokens))],
                                 span(args.reply_tokens)) for _ in range(args.turns)]})
    return systems, convs


def token_range(text):
    lo, hi = (int(x) for x in text.split(","))
    return lo, hi


class Trie:
    """Every sequence a run has held (prompt + reply), to compute the floor: the prompt tokens none covers."""

    def __init__(self):
        self.root = {}
        self.lock = threading.Lock()

    def insert(self, seq):
        with self.lock:
            node = self.root
            for t in seq:
                node = node.setdefault(t, {})

    def covered(self, seq):
        with self.lock:
            node, n = self.root, 0
            for t in seq:
                if t not in node:
                    break
                node, n = node[t], n + 1
            return n


def start_server(args, extra, log):
    port = free_port()
    proc = subprocess.Popen([args.server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-np", "4",
                             "-c", str(args.ctx), "-t", str(args.threads), "--no-warmup", "--temp", "0"]
                            + (["--override-kv", f"{args.arch}.context_length=int:{args.ctx}"] if args.arch else [])
                            + args.server_args.split() + extra,
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    return proc, port


def tokenize(args, text):
    with open(os.path.join(args.workdir, "tokenize.log"), "w") as log:
        proc, port = start_server(args, CONFIGS["off"][1], log)
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize",
                                         data=json.dumps({"content": text, "add_special": False}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())["tokens"]
        finally:
            proc.terminate()
            proc.wait()


def run_config(args, name, extra, systems, convs, round_no):
    log_path = os.path.join(args.workdir, re.sub(r"[^a-z]+", "-", name.lower()) + f"-{round_no}.log")
    log = open(log_path, "w")
    proc, port = start_server(args, extra, log)
    try:
        trie = Trie()
        totals = {"prompt": 0, "computed": 0, "floor": 0, "prompt_ms": 0.0, "predicted_ms": 0.0, "predicted": 0,
                  "requests": 0, "load": os.getloadavg()[0]}
        lock = threading.Lock()
        queue = list(range(len(convs)))
        t0 = time.time()

        def client():
            while True:
                with lock:
                    if not queue:
                        return
                    c = queue.pop(0)
                history = list(systems[convs[c]["system"]])
                for user, reply in convs[c]["turns"]:
                    prompt = history + user
                    floor = len(prompt) - trie.covered(prompt)
                    body = {"prompt": prompt, "n_predict": reply, "temperature": 0, "ignore_eos": True,
                            "return_tokens": True, "cache_prompt": "--cache-ram" not in extra,
                            "message_delimiters": [{"role": "user", "delimiter": USER_DELIMITER}]}
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                                                 data=json.dumps(body).encode(),
                                                 headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(req, timeout=3600) as r:
                        res = json.loads(r.read())
                    history = prompt + res["tokens"]
                    trie.insert(history)
                    with lock:
                        totals["prompt"] += len(prompt)
                        totals["computed"] += res["timings"]["prompt_n"]
                        totals["prompt_ms"] += res["timings"]["prompt_ms"]
                        totals["predicted_ms"] += res["timings"]["predicted_ms"]
                        totals["predicted"] += res["timings"]["predicted_n"]
                        totals["floor"] += floor
                        totals["requests"] += 1

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        totals["wall_s"] = time.time() - t0
        totals["load"] = (totals["load"] + os.getloadavg()[0]) / 2
    finally:
        proc.terminate()
        proc.wait()
        log.close()
    text = open(log_path).read()
    state = "-"
    m = re.findall(r"reprise: .*snapshot bytes held (\d+).*kept KV cells (\d+) \(bytes (\d+)", text)
    if m:
        state = (f"{int(m[-1][0]) / 2**20:.1f} MiB snapshots, {int(m[-1][2]) / 2**20:.1f} MiB KV copies "
                 f"({m[-1][1]} cells)")
    else:
        # context checkpoints held per slot at the end: the count the last creation reports, less later erasures
        held, size = {}, 0.0
        for line in text.splitlines():
            m = re.search(r"id +(\d+) \|.*created context checkpoint (\d+) of \d+ .*size = ([0-9.]+) MiB", line)
            if m:
                held[m.group(1)] = int(m.group(2))
                size = float(m.group(3))
                continue
            m = re.search(r"id +(\d+) \|.*(erasing|erased|superseding) .*context checkpoint", line)
            if m and held.get(m.group(1), 0) > 0:
                held[m.group(1)] -= 1
        cache = re.findall(r"cache state: (\d+) prompts, ([0-9.]+) MiB", text)
        parts = []
        if held:
            n = sum(held.values())
            parts.append(f"{n * size:.1f} MiB in {n} context checkpoints")
        if cache:
            parts.append(f"{float(cache[-1][1]):.1f} MiB host prompt cache ({cache[-1][0]} prompts)")
        state = ", ".join(parts) if parts else "-"
    totals["state"] = state
    return totals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--configs", default="default,chat,strict",
                    help="comma-separated, run in this order each round: " + ",".join(CONFIGS))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--system-tokens", type=token_range, default=(200, 599), help="MIN,MAX of a system prompt")
    ap.add_argument("--user-tokens", type=token_range, default=(16, 199), help="MIN,MAX of a user message")
    ap.add_argument("--reply-tokens", type=token_range, default=(30, 500), help="MIN,MAX of a reply")
    ap.add_argument("--ctx", type=int, default=65536)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="build-llama-bench")
    ap.add_argument("--out", default="")
    ap.add_argument("--server-args", default="", help="options every configuration's server gets, e.g. "
                    "'--spec-type ngram-simple' (speculative decoding on both sides)")
    ap.add_argument("--arch", default="", help="the GGUF's architecture: lifts its training context to --ctx "
                    "(the random test models declare 256)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    systems, convs = workload(args, tokenize(args, USER_DELIMITER))
    rows = []
    for round_no in range(1, args.rounds + 1):
        for key in args.configs.split(","):
            name, extra = CONFIGS[key]
            r = run_config(args, name, extra, systems, convs, round_no)
            rows.append((round_no, name, r))
            print(f"round {round_no}: {name}: {r}", flush=True)
    lines = ["| round | configuration | prompt tokens | computed (timings.prompt_n) | floor | computed / floor | "
             "prefill time (s) | decode ms / token | wall (s) | load | state held at the end |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for round_no, name, r in rows:
        lines.append(f"| {round_no} | {name} | {r['prompt']} | {r['computed']} | {r['floor']} | "
                     f"{r['computed'] / r['floor']:.2f} | {r['prompt_ms'] / 1000:.2f} | "
                     f"{r['predicted_ms'] / max(r['predicted'], 1):.2f} | {r['wall_s']:.1f} | {r['load']:.1f} | "
                     f"{r['state']} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
