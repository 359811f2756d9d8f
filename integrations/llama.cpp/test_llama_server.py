#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Exactness of llama-server with Reprise, through the server's HTTP API.

For each model (tiny random-weight GGUFs written at test time by llama.cpp's test-llama-archs):
  strict: every turn's output (greedy tokens and the top-5 log-probabilities of each) equals llama-server with
          prompt caching off, bit for bit, while Reprise skips prefill;
  chat:   every turn's output equals one never-ending session per conversation (upstream llama-server, one
          slot per conversation, fed each turn's new tokens), bit for bit, while Reprise skips prefill;
  faults: a deliberately wrong restore (a snapshot's state, the K and V bytes of a cached block as they are
          copied into the slot, or another conversation's cells kept in the slot's stream) is caught by the same
          comparisons;
  spec:   speculative decoding (n-gram drafts, accepted and rejected) on both servers: strict and chat as above;
  keys:   a LoRA adapter's scale (the request's `lora`, the server's /lora-adapters) is part of the key: a request
          never restores state computed under another scale, and equals caching off under its own;
  errors: bad option values, a model Reprise cannot cache and features it cannot cache for (a draft model)
          stop the server at startup with a message; a hit failing while it is set up ends its request with
          HTTP 500 and leaves the cache as it was;
  media:  multimodal prompts (--mmproj, a random projector written at test time): an image's tokens are keyed
          by its hash at its position, so another image at the same position shares only the text before it and
          equals caching off, the same image hits, a text and an image request share their system prompt, and
          a chat turn after an image restores the turn's end; on a model with M-RoPE positions too.

`--only defaults` (not in the default set: a measurement, asserting nothing) runs strict and chat under
llama-server's own defaults instead (512-token ubatches, every thread, and once with a turn's requests sent
together so the slots share ubatches) and reports how many turns still equal their reference and the largest
log-probability difference.

Usage: test_llama_server.py --server BIN --archs BIN --workdir DIR [--only strict,chat,branch,faults,spec,keys,errors,media]
Exit status 0 when every check passes.
"""
import argparse
import base64
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib

# Mamba2 + attention, gated delta + attention, attention and Mamba2 side by side in each layer, Mamba2 only,
# attention only
MODELS = ["nemotron_h", "qwen35", "falcon-h1", "mamba2", "llama"]
# models with recurrent layers (the last four run with --models only: CI's time goes to the five above)
HYBRID = {"nemotron_h", "qwen35", "falcon-h1", "mamba2", "granitehybrid", "nemotron_h_moe", "qwen3next", "qwen35moe"}
ATTENTION_FREE = {"mamba2"}
# What every server of a comparison shares (docs/llama.cpp.md, "Which equalities hold"): a KV stream per slot,
# flash attention, ubatches of 32 tokens (never the tiled kernel), one thread (one KV chunk in decode).
COMMON = ["-c", "1024", "-b", "512", "-ub", "32", "-t", "1", "-tb", "1", "-fa", "on", "--no-warmup", "--temp", "0", "--seed", "1"]
# llama-server's defaults (`--only defaults`): its ubatch, thread counts and flash-attention choice
DEFAULTS = ["-c", "1024", "--no-warmup", "--temp", "0", "--seed", "1"]


def slots(n, per_slot=1024):
    """n slots of per_slot cells each (every slot has a KV stream of n_ctx / n cells)."""
    return ["-np", str(n), "-c", str(n * per_slot)]
SNAPSHOT_BYTES = "64M"


#: what every server of a run shares (COMMON, or DEFAULTS under `--only defaults`)
SETTINGS = [COMMON]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, model, extra, workdir, name, env=None):
        self.port = free_port()
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "w")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port)]
                                     + SETTINGS[0] + extra, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name}: server exited with {self.proc.returncode}, see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name}: server did not become ready, see {self.log_path}")

    def last_request_in_order(self, n_requests):
        """Reprise's log line for request n_requests (the server logs from its own thread, so wait for it): were
        its KV cells in position order? None for a server without Reprise."""
        deadline = time.time() + 30
        while True:
            with open(self.log_path) as f:
                found = [line for line in f if "last in order" in line]
            if len(found) >= n_requests:
                return found[n_requests - 1].strip().endswith("last in order yes")
            if time.time() > deadline:
                return None
            time.sleep(0.05)

    def last_figure(self, name):
        """The number after `name` in Reprise's last log line."""
        with open(self.log_path) as f:
            line = [x for x in f if "reprise: prompt tokens" in x][-1]
        return line.split(name + " ")[1].split()[0]

    def complete(self, prompt, n_predict, cache_prompt=True, slot=-1, delimiters=None):
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "n_probs": 5, "return_tokens": True,
                "ignore_eos": True, "cache_prompt": cache_prompt, "id_slot": slot, "stream": False}
        if delimiters:
            body["message_delimiters"] = delimiters
        return self.post("/completion", body)

    def tokenize(self, text):
        return self.post("/tokenize", {"content": text})["tokens"]

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def workload(seed, n_conv=3, turns=4):
    """Conversations sharing a system prompt: (conversation, user tokens, reply length) in arrival order."""
    rng = random.Random(seed)
    system = [rng.randrange(4, 128) for _ in range(70)]
    steps = []
    for t in range(turns):
        for c in range(n_conv):
            user = [rng.randrange(4, 128) for _ in range(rng.randrange(9, 41))]
            steps.append((c, user, rng.randrange(5, 21)))
    return system, steps


def branching_workload(seed, n_conv=8, n_steps=36):
    """Interleaved conversations over system prompts of 37, 101 and 333 tokens, with regenerated, edited and
    forked turns: (operation, conversation, source conversation, user tokens, reply length) in arrival order.
    `new` opens a conversation on a system prompt (the source names which), `next` continues it, `regen` asks
    its last prompt again, `edit` replaces its last user message, `fork` opens it as a copy of the source
    conversation's history with a new message. A quarter of the replies are one token."""
    rng = random.Random(seed)
    steps, opened = [], []
    while len(steps) < n_steps:
        user = [rng.randrange(4, 128) for _ in range(rng.randrange(1, 91))]
        reply = 1 if rng.random() < 0.25 else rng.randrange(2, 25)
        if len(opened) < n_conv and (len(opened) < 2 or rng.random() < 0.3):
            c = len(opened)
            if len(opened) >= 3 and rng.random() < 0.4:
                steps.append(("fork", c, rng.choice(opened), user, reply))
            else:
                steps.append(("new", c, c % 3, user, reply))
            opened.append(c)
            continue
        op = rng.choices(["next", "regen", "edit"], weights=[6, 2, 2])[0]
        steps.append((op, rng.choice(opened), None, user, reply))
    return steps


def output_of(res):
    """What must be equal: the generated tokens and every top-5 log-probability, as the JSON carries them."""
    probs = [(p["id"], p["logprob"], [(t["id"], t["logprob"]) for t in p["top_logprobs"]])
             for p in res["completion_probabilities"]]
    return res["tokens"], probs


def drift(got, ref):
    """(whether the generated tokens are equal, the largest difference of a top-5 log-probability both list at
    a position whose context is the same in both: up to and including the first differing token)."""
    (gt, gp), (rt, rp) = output_of(got), output_of(ref)
    same = 0
    while same < min(len(gt), len(rt)) and gt[same] == rt[same]:
        same += 1
    diff = 0.0
    for a, b in zip(gp[:same + 1], rp[:same + 1]):
        top = dict(b[2])
        for tid, lp in a[2]:
            if tid not in top:
                continue
            if lp is None or top[tid] is None:  # a non-finite value (JSON null): a difference only if one is
                diff = diff if lp is top[tid] else float("inf")
            else:
                diff = max(diff, abs(lp - top[tid]))
    return gt == rt, diff


class Pair:
    """The outcome of one workload on a candidate and its reference, turn by turn."""

    def __init__(self):
        self.mismatches = []        # turns whose output differs, the candidate's cells in position order
        self.order_mismatches = []  # turns whose output differs, the candidate's cells out of position order
        self.out_of_order = []      # turns whose cells were out of position order (equal or not)
        self.hits_in_order = 0      # turns that skipped prefill, cells in order, output compared
        self.total = self.computed = 0
        self.turns = 0
        self.prompts = []           # (prompt tokens, prompt tokens computed) of each turn
        self.tokens_equal = 0       # turns whose generated tokens equal the reference's
        self.max_diff = 0.0         # the largest log-probability difference where both had the same context

    def record(self, i, candidate, prompt, got, ref, in_order=None):
        """Turn i: the candidate's answer `got` against the reference's `ref`, and whether its cells were in order
        (read from its log unless given)."""
        if in_order is None:
            in_order = candidate.last_request_in_order(i + 1)
        if in_order is None:
            raise RuntimeError(f"turn {i}: no Reprise log line, see {candidate.log_path}")
        equal = output_of(got) == output_of(ref)
        if not in_order:
            self.out_of_order.append(i)
        if not equal:
            (self.mismatches if in_order else self.order_mismatches).append(i)
        elif in_order and got["timings"]["prompt_n"] < len(prompt):
            self.hits_in_order += 1
        equal_tokens, diff = drift(got, ref)
        self.tokens_equal += equal_tokens
        self.max_diff = max(self.max_diff, diff)
        self.total += len(prompt)
        self.computed += got["timings"]["prompt_n"]
        self.prompts.append((len(prompt), got["timings"]["prompt_n"]))


#: A user message's delimiter: its tokens start every user message of the chat workload, and the candidate is
#: told (llama-server's message_delimiters), so it knows where the shared system prompt ends.
USER_DELIMITER = "<user>"


def run_pair(candidate, reference, system, steps, ref_cache_prompt, ref_slots, delimiter=None, cand_slots=False):
    """Feeds the workload to both servers turn by turn and compares every output bit for bit. `delimiter`: the
    tokens of USER_DELIMITER, put before every user message."""
    history = {}
    r = Pair()
    r.turns = len(steps)
    delimiters = [{"role": "user", "delimiter": USER_DELIMITER}] if delimiter else None
    if delimiter:
        # The delimiter's tokens only where a user message starts (a random system prompt may hold them too).
        free = [t for t in range(4, 128) if t not in delimiter]
        clean = lambda tokens: [free[t % len(free)] if t in delimiter else t for t in tokens]  # noqa: E731
        system, steps = clean(system), [(c, clean(user), n) for c, user, n in steps]
    for i, (c, user, n) in enumerate(steps):
        prompt = history.get(c, list(system)) + (delimiter or []) + user
        ref = reference.complete(prompt, n, cache_prompt=ref_cache_prompt, slot=c if ref_slots else -1)
        try:
            got = candidate.complete(prompt, n, delimiters=delimiters, slot=c if cand_slots else -1)
        except urllib.error.HTTPError as e:
            # a request the candidate fails (a decode refusing inconsistent positions) differs from the reference
            print(f"     turn {i}: the candidate answered HTTP {e.code}", flush=True)
            got = {"tokens": ref["tokens"], "completion_probabilities": [], "timings": {"prompt_n": len(prompt)}}
        r.record(i, candidate, prompt, got, ref)
        history[c] = prompt + got["tokens"]
    return r


def run_together(candidate, reference, system, steps):
    """The workload with each round's requests (one turn of every conversation) sent to the candidate together,
    so its slots share ubatches; the reference (caching off) answers them one by one."""
    import threading
    history, r = {}, Pair()
    r.turns = len(steps)
    n_conv = 1 + max(c for c, _, _ in steps)
    for start in range(0, len(steps), n_conv):
        batch = list(enumerate(steps))[start:start + n_conv]
        prompts = {i: history.get(c, list(system)) + user for i, (c, user, n) in batch}
        got = {}

        def send(i, n):
            got[i] = candidate.complete(prompts[i], n)
        threads = [threading.Thread(target=send, args=(i, n)) for i, (c, user, n) in batch]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (c, user, n) in batch:
            ref = reference.complete(prompts[i], n, cache_prompt=False)
            r.record(i, candidate, prompts[i], got[i], ref, in_order=True)
            history[c] = prompts[i] + got[i]["tokens"]
    return r


def measure_defaults(args, model, arch):
    """strict and chat under llama-server's defaults: how many turns still equal their reference, and the largest
    log-probability difference. Prints one line per comparison; asserts nothing."""
    SETTINGS[0] = DEFAULTS
    try:
        system, steps = workload(seed=zlib.crc32(arch.encode()) + args.seed)
        n_conv = 1 + max(c for c, _, _ in steps)
        budget = ["--reprise-snapshot-bytes", SNAPSHOT_BYTES] if arch in HYBRID else []
        rows = []

        def pair(name, cand_opts, ref_opts, run):
            ref = Server(args.server, model, ref_opts + ["--cache-ram", "0", "--ctx-checkpoints", "0"]
                         + long_context(arch), args.workdir, f"{arch}-defaults-{name}-ref")
            try:
                cand = Server(args.server, model, cand_opts + budget + long_context(arch), args.workdir,
                              f"{arch}-defaults-{name}")
                try:
                    r = run(cand, ref)
                finally:
                    cand.stop()
            finally:
                ref.stop()
            rows.append((name, r))
            print(f"     {arch}: defaults: {name}: {r.tokens_equal} / {r.turns} turns with equal tokens, "
                  f"{r.turns - len(r.mismatches) - len(r.order_mismatches)} bitwise equal, largest log-probability "
                  f"difference {r.max_diff:.3g}; {r.computed} of {r.total} prompt tokens computed", flush=True)

        pair("strict, one request at a time", slots(2) + ["--reprise", "strict"], slots(1),
             lambda c, ref: run_pair(c, ref, system, steps, ref_cache_prompt=False, ref_slots=False))
        branch_steps = branching_workload(zlib.crc32(arch.encode()) + args.seed)
        pair("strict, branching", slots(4, 4096) + ["--reprise", "strict"], slots(1, 4096),
             lambda c, ref: run_branching(c, ref, zlib.crc32(arch.encode()) + args.seed, branch_steps))
        pair("strict, a round's requests together", slots(n_conv) + ["--reprise", "strict"], slots(1),
             lambda c, ref: run_together(c, ref, system, steps))
        if arch in HYBRID:
            pair("chat, one request at a time", slots(2) + ["--reprise", "chat"], slots(n_conv),
                 lambda c, ref: run_pair(c, ref, system, steps, ref_cache_prompt=True, ref_slots=True))
        return rows
    finally:
        SETTINGS[0] = COMMON


def run_branching(candidate, reference, seed, steps):
    """The branching workload on both servers (the reference with caching off), compared turn by turn."""
    rng = random.Random(seed)
    systems = [[rng.randrange(4, 128) for _ in range(n)] for n in (37, 101, 333)]
    history, base, last = {}, {}, {}
    r = Pair()
    r.turns = len(steps)
    for i, (op, c, src, user, n) in enumerate(steps):
        if op == "new":
            base[c] = list(systems[src])
        elif op == "fork":
            base[c] = list(history[src])
        elif op == "next":
            base[c] = history[c]
        prompt = last[c] if op == "regen" else base[c] + user
        ref = reference.complete(prompt, n, cache_prompt=False)
        got = candidate.complete(prompt, n)
        r.record(i, candidate, prompt, got, ref)
        last[c] = prompt
        history[c] = prompt + got["tokens"]
    return r


def get_json(server, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=30) as r:
        body = r.read().decode()
    return body if path == "/metrics" else json.loads(body)


def check_figures(server, arch, r, failures):
    """Reprise's figures in /metrics and /slots: equal to what its log says after the last request, and the
    standard cached-token count equal to the prompt tokens the turns skipped."""
    with open(server.log_path) as f:
        line = [x for x in f if "reprise: prompt tokens" in x][-1]
    words = line.split()

    def after(*key):
        for i in range(len(words) - len(key)):
            if tuple(words[i:i + len(key)]) == key:
                return int(words[i + len(key)])
        raise RuntimeError(f"no '{' '.join(key)}' in {line}")

    logged = {"reprise_snapshot_restores_total": after("restores"), "reprise_captures_total": after("captures"),
              "reprise_snapshot_bytes": after("snapshot", "bytes", "held"),
              "reprise_kv_cells_kept": after("kept", "KV", "cells"),
              "reprise_kv_cells_in_place_total": after("in", "place"),
              "prompt_tokens_cached_total": r.total - r.computed}
    metrics = {}
    for x in get_json(server, "/metrics").splitlines():
        if x.startswith("llamacpp:"):
            name, value = x[len("llamacpp:"):].split()
            metrics[name] = float(value)
    shown = {k: metrics.get(k) for k in logged}
    # llama-server prints every metric with 6 significant digits
    check(all(shown[k] == float(f"{logged[k]:.6g}") for k in logged) and
          (logged["reprise_kv_cells_kept"] > 0) == (arch not in ATTENTION_FREE),
          f"{arch}: /metrics shows Reprise's figures {shown}, the log's {logged}", failures)
    slots = get_json(server, "/slots")
    per = [s["reprise"] for s in slots if "reprise" in s]
    summed = {"reprise_snapshot_restores_total": sum(x["snapshot_restores"] for x in per),
              "reprise_captures_total": sum(x["captures"] for x in per)}
    held = {(x["snapshot_bytes_held"], x["kv_cells_kept"]) for x in per}
    check(len(per) >= 1 and all(summed[k] == logged[k] for k in summed) and
          held == {(logged["reprise_snapshot_bytes"], logged["reprise_kv_cells_kept"])},
          f"{arch}: /slots shows each slot's restores and captures (summing to {summed}) and the cache's bytes "
          f"and kept cells {held}", failures)


def report(arch, policy, reference, r, failures):
    check(not r.mismatches, f"{arch}: {policy} == {reference} on every turn whose KV cells are in position order "
          f"(mismatching turns: {r.mismatches}; out of cell order: {r.out_of_order}, of which differ: "
          f"{r.order_mismatches})", failures)
    # The exception for cells out of position order must stay an exception: most turns are compared, and
    # several of them are hits.
    check(len(r.out_of_order) * 2 <= r.turns, f"{arch}: {policy}: at most half the turns out of cell order "
          f"({len(r.out_of_order)} of {r.turns})", failures)
    check(r.hits_in_order >= 3, f"{arch}: {policy} skipped prefill on {r.hits_in_order} compared turns "
          f"({r.computed} of {r.total} prompt tokens computed)", failures)


def check(cond, what, failures):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def long_context(arch):
    """test-llama-archs writes a training context of 256 tokens, which llama-server caps each slot to."""
    return ["--override-kv", f"{arch}.context_length=int:4096"]


def test_exactness(args, model, arch, failures):
    system, steps = workload(seed=zlib.crc32(arch.encode()) + args.seed)
    n_conv = 1 + max(c for c, _, _ in steps)
    budget = ["--reprise-snapshot-bytes", SNAPSHOT_BYTES] if arch in HYBRID else []

    def compare(policy, reference, ref_name, ref_options, session):
        """Reprise under `policy` against `reference` (a server run with `ref_options`; `session`: one slot per
        conversation, each turn's prompt extending the last), then, with a deliberate fault, caught."""
        ref = Server(args.server, model, ref_options + ["--cache-ram", "0", "--ctx-checkpoints", "0"]
                     + long_context(arch), args.workdir, f"{arch}-{ref_name}")
        try:
            # (fault, server name, slots): 2 slots for 3 conversations (hits copy cells in, or keep them in place
            # when a conversation returns to its slot), and under chat a slot per conversation (every hit keeps
            # the slot's cells in place, up to the turn end inside its last block)
            runs = [(None, f"{arch}-{policy}", 2)]
            if policy == "chat" and arch not in ATTENTION_FREE:
                runs.append((None, f"{arch}-{policy}-slot-each", n_conv))
            if "faults" in args.only:
                runs.append(("state" if arch in HYBRID else "kv", f"{arch}-{policy}-fault", 2))
                if arch in HYBRID and arch not in ATTENTION_FREE and policy == "strict":
                    # the hybrid's KV blocks, copied into the slot's stream, corrupted
                    runs.append(("kv", f"{arch}-{policy}-fault-kv", 2))
                if arch not in ATTENTION_FREE and policy == "strict":
                    # a slot's cells kept in place for a hit whatever conversation left them there
                    runs.append(("stale", f"{arch}-{policy}-fault-stale", 2))
            for fault, name, n_slots in runs:
                cand = Server(args.server, model, slots(n_slots) + ["--reprise", policy] + budget + long_context(arch),
                              args.workdir, name,
                              env={"REPRISE_LLAMA_FAULT": fault} if fault else None)
                no_reuse = None
                try:
                    delimiter = cand.tokenize(USER_DELIMITER) if policy == "chat" else None
                    r = run_pair(cand, ref, system, steps, ref_cache_prompt=session, ref_slots=session,
                                 delimiter=delimiter, cand_slots=n_slots != 2)
                    if fault is None and not session:
                        # A request asking for no prompt reuse (cache_prompt: false) on a prompt Reprise holds.
                        prompt, n = list(system) + steps[0][1], steps[0][2]
                        again = cand.complete(prompt, n, cache_prompt=False)
                        no_reuse = (len(prompt), again["timings"]["prompt_n"],
                                    output_of(again) == output_of(ref.complete(prompt, n, cache_prompt=False)))
                finally:
                    cand.stop()
                if no_reuse:
                    check(no_reuse[1] == no_reuse[0] and no_reuse[2], f"{arch}: {policy}: a request with "
                          f"cache_prompt false computes its whole prompt ({no_reuse[1]} of {no_reuse[0]} tokens) "
                          f"and equals caching off ({no_reuse[2]})", failures)
                if fault is None:
                    label = policy if n_slots == 2 else f"{policy} (a slot per conversation)"
                    report(arch, label, reference, r, failures)
                    if arch not in ATTENTION_FREE:
                        # hits on a slot whose stream still held the prefix kept its cells in place
                        in_place = int(cand.last_figure("in place"))
                        check(in_place > 0, f"{arch}: {label}: hits kept {in_place} KV cells in place (the rest "
                              f"copied in), every turn compared", failures)
                    if delimiter and n_slots == 2:
                        # The first user message starts after the system prompt: the first conversation snapshots
                        # there (rounded down to Reprise's 32-token blocks), the second restores it on its first
                        # turn (without the delimiter it would compute everything, and capture it for the third).
                        shared = len(system) // 32 * 32
                        (length, computed), first = r.prompts[1], steps[1][0]
                        check(steps[0][0] != first and computed == length - shared,
                              f"{arch}: chat: the second conversation over the system prompt restores its end "
                              f"(the first user message, marked by a message delimiter) at its first meeting "
                              f"({length - computed} of {length} prompt tokens skipped, {shared} expected)", failures)
                else:
                    check(bool(r.mismatches), f"{arch}: a wrong restore ({fault}) under {policy} is caught on turns "
                          f"whose cells are in order (turns {r.mismatches})", failures)
        finally:
            ref.stop()

    if "strict" in args.only:
        compare("strict", "caching off", "off", slots(1), session=False)
    if "branch" in args.only:
        # More conversations than slots, regenerated, edited and forked turns: every turn equals caching off,
        # which needs each slot's cells in position order, and no state computed out of order ever restored.
        seed = zlib.crc32(arch.encode()) + args.seed
        branch_steps = branching_workload(seed)
        big = long_context(arch)
        ref = Server(args.server, model, slots(1, 4096) + ["--cache-ram", "0", "--ctx-checkpoints", "0"] + big,
                     args.workdir, f"{arch}-branch-off")
        try:
            cand = Server(args.server, model, slots(4, 4096) + ["--reprise", "strict", "--metrics"] + budget + big,
                          args.workdir, f"{arch}-branch-strict")
            try:
                r = run_branching(cand, ref, seed, branch_steps)
                check_figures(cand, arch, r, failures)
            finally:
                cand.stop()
        finally:
            ref.stop()
        print(f"     {arch}: branching workload: {r.turns - len(r.mismatches) - len(r.order_mismatches)} / {r.turns} "
              f"turns equal, {len(r.out_of_order)} out of cell order ({len(r.order_mismatches)} differ), "
              f"{r.computed} of {r.total} prompt tokens computed", flush=True)
        check(not r.mismatches and not r.order_mismatches, f"{arch}: strict == caching off on every branching turn "
              f"(mismatching turns: {r.mismatches}; out of cell order: {r.out_of_order}, of which differ: "
              f"{r.order_mismatches})", failures)
        check(r.hits_in_order >= 3, f"{arch}: strict skipped prefill on {r.hits_in_order} compared branching turns",
              failures)
    if "chat" in args.only and arch in HYBRID:
        compare("chat", "a never-ending session per conversation", "session", slots(n_conv), session=True)


#: n-gram self-speculative decoding (no draft model: drafts come from the tokens alone), tuned to draft often on
#: random-weight models so that drafts are both accepted and rejected
SPECULATIVE = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4",
               "--spec-ngram-simple-min-hits", "1"]


def spec_figures(server):
    """(draft tokens, accepted draft tokens) from llama-server's /metrics."""
    metrics = {}
    for x in get_json(server, "/metrics").splitlines():
        if x.startswith("llamacpp:spec_decode_num_") and "{" not in x:
            name, value = x[len("llamacpp:spec_decode_num_"):].split()
            metrics[name] = int(float(value))
    return metrics.get("draft_tokens_total", 0), metrics.get("accepted_tokens_total", 0)


def test_speculative(args, model, arch, failures):
    """Speculative decoding (n-gram drafts) on both servers: strict equals caching off and chat the never-ending
    session on every turn, while the target rejects drafts (llama-server rolls a recurrent target back to a
    checkpoint and replays the accepted tokens; Reprise's sequence grows by accepted tokens only). A wrong
    snapshot restore under speculation is caught by the same comparison."""
    system, steps = workload(seed=zlib.crc32(arch.encode()) + args.seed)
    n_conv = 1 + max(c for c, _, _ in steps)
    budget = ["--reprise-snapshot-bytes", SNAPSHOT_BYTES] if arch in HYBRID else []
    runs = [("strict", None)] + ([("chat", None), ("strict", "state")] if arch in HYBRID else [])
    for policy, fault in runs:
        session = policy == "chat"
        ref = Server(args.server, model, slots(n_conv if session else 1) + ["--cache-ram", "0", "--ctx-checkpoints",
                     "0", "--metrics"] + SPECULATIVE + long_context(arch), args.workdir, f"{arch}-spec-{policy}-ref")
        try:
            name = f"{arch}-spec-{policy}" + (f"-fault-{fault}" if fault else "")
            cand = Server(args.server, model, slots(2) + ["--reprise", policy, "--metrics"] + budget + SPECULATIVE
                          + long_context(arch), args.workdir, name, env={"REPRISE_LLAMA_FAULT": fault} if fault else None)
            try:
                delimiter = cand.tokenize(USER_DELIMITER) if session else None
                r = run_pair(cand, ref, system, steps, ref_cache_prompt=session, ref_slots=session, delimiter=delimiter)
                drafted, accepted = spec_figures(cand)
                ref_drafts = spec_figures(ref)
            finally:
                cand.stop()
        finally:
            ref.stop()
        if fault:
            check(bool(r.mismatches), f"{arch}: a wrong restore ({fault}) under {policy} with speculative decoding "
                  f"is caught (turns {r.mismatches})", failures)
            continue
        reference = "a never-ending session per conversation" if session else "caching off"
        report(arch, f"{policy} with speculative decoding", f"{reference} (speculative decoding too)", r, failures)
        # a checkpoint replay feeds the sampled token again: recognized, never an error that drops the request
        with open(cand.log_path) as f:
            errors = [x.strip() for x in f if "Reprise: token" in x or "Reprise: commit failed" in x
                      or "Reprise: extend failed" in x]
        check(not errors, f"{arch}: {policy}: every speculative step kept Reprise's sequence ({errors[:1]})", failures)
        check(0 < accepted < drafted and (drafted, accepted) == ref_drafts,
              f"{arch}: {policy}: the target accepted {accepted} of {drafted} draft tokens (the reference "
              f"{ref_drafts[1]} of {ref_drafts[0]}): drafts accepted and rejected alike", failures)


def startup_error(args, model, extra, limit_kib=None):
    """Runs the server with options that must stop it (under an address-space limit of `limit_kib`, when
    given); returns (exit status, output)."""
    cmd = [args.server, "-m", model, "--port", str(free_port())] + COMMON + extra
    if limit_kib is not None:
        cmd = ["bash", "-c", f'ulimit -v {limit_kib} && exec "$@"', "bash"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def machine_bytes():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_errors(args, models, failures):
    m = models["nemotron_h"]
    cases = [
        (m, ["--reprise", "fast"], "--reprise takes 'chat' or 'strict'"),
        (m, ["--reprise", "chat", "--reprise-snapshot-bytes", "12x"], "is not a positive byte count"),
        (m, ["--reprise", "chat", "--reprise-snapshot-bytes", "0"], "is not a positive byte count"),
        (m, ["--reprise", "chat"], "needs --reprise-snapshot-bytes"),
        (m, ["--reprise", "strict", "--reprise-snapshot-bytes", "1"], "budget_too_small"),
        (m, ["--reprise-snapshot-bytes", "1M"], "needs --reprise chat|strict"),
        (models["mamba"], ["--reprise", "chat", "--reprise-snapshot-bytes", "64M"], "Reprise cannot cache"),
        (models["llama"], ["--reprise", "chat"], "--reprise chat needs a model with recurrent layers"),
        # every option Reprise would override stops the server instead
        (m, ["--reprise", "strict", "-kvu"], "--kv-unified cannot be used with --reprise"),
        (m, ["--reprise", "strict", "--reprise-snapshot-bytes", "64M", "--reprise-kv-bytes", "0"],
         "--reprise-kv-bytes: '0' is not a positive byte count"),
        (m, ["--reprise-kv-bytes", "1M"], "--reprise-kv-bytes needs --reprise chat|strict"),
        (m, ["--reprise", "strict", "--reprise-snapshot-bytes", "64M", "--reprise-kv-bytes",
             f"{machine_bytes() // 2**30 + 1}G"], "--reprise-kv-bytes: "),
        (m, ["--reprise", "strict", "--cache-reuse", "256"], "--cache-reuse cannot be used with --reprise"),
        (m, ["--reprise", "strict", "--ctx-checkpoints", "4"], "--ctx-checkpoints cannot be used with --reprise"),
        (m, ["--reprise", "strict", "--checkpoint-min-step", "64"], "--checkpoint-min-step cannot be used"),
        (m, ["--reprise", "strict", "--cache-ram", "100"], "--cache-ram cannot be used with --reprise"),
        (m, ["--reprise", "strict", "--cache-idle-slots"], "--cache-idle-slots cannot be used with --reprise"),
        (m, ["--reprise", "strict", "--context-shift"], "--context-shift cannot be used with --reprise"),
        # what Reprise cannot cache for: a draft model's or head's own context
        (m, ["--reprise", "strict", "-md", m], "a draft model or head cannot be used with --reprise"),
        (m, ["--reprise", "strict", "--spec-type", "draft-mtp"], "a draft model or head cannot be used"),
        # a KV cache Reprise cannot account
        (m, ["--reprise", "strict", "--reprise-snapshot-bytes", "64M", "-ctk", "q8_0", "-ctv", "q8_0"],
         "Reprise accounts a KV cache of f32, f16 or bf16"),
        # a budget this machine cannot hold
        (m, ["--reprise", "strict", "--reprise-snapshot-bytes", f"{machine_bytes() // 2**30 + 1}G"],
         "is more than this machine's memory"),
    ]
    for model, extra, text in cases:
        rc, out = startup_error(args, model, extra)
        check(rc != 0 and text in out, f"startup error for {' '.join(extra)} on {os.path.basename(model)}: "
              f"exit {rc}, says '{text}'", failures)
    # under ulimit -v 4G, a budget above it: refused with a message, not an abort on std::bad_alloc
    rc, out = startup_error(args, m, ["--reprise", "strict", "--reprise-snapshot-bytes", "5G"], limit_kib=4 << 20)
    check(rc != 0 and "bytes is more than this" in out and "bad_alloc" not in out,
          f"a 5G budget under ulimit -v 4G stops the server with a message (exit {rc})", failures)
    # option values are checked before the model loads: a bad one is reported even when the model file is missing
    for extra, text in [(["--reprise", "chat", "--reprise-snapshot-bytes", "12x"], "is not a positive byte count"),
                        (["--reprise", "strict", "--cache-reuse", "256"], "--cache-reuse cannot be used"),
                        (["--reprise", "strict", "-md", "draft.gguf"], "a draft model or head cannot be used")]:
        rc, out = startup_error(args, os.path.join(args.workdir, "missing.gguf"), extra)
        check(rc != 0 and text in out and "missing.gguf" not in out,
              f"{' '.join(extra)} is refused before the model loads (exit {rc})", failures)
    # a budget far above what the cache can use is not allocated: the cache keeps at most two snapshots per KV
    # block, and the server's memory stays that of the model
    big = f"{machine_bytes() // 2**31}G"
    srv = Server(args.server, m, ["--reprise", "strict", "--reprise-snapshot-bytes", big], args.workdir, "big-budget")
    try:
        with open(f"/proc/{srv.proc.pid}/status") as f:
            rss_kib = int([x for x in f if x.startswith("VmRSS:")][0].split()[1])
    finally:
        srv.stop()
    with open(srv.log_path) as f:
        text = f.read()
    # (4 slots, the automatic count, of 256 cells: 32 blocks for their contexts, 32 more for cached ones by default)
    check(rss_kib < 512 * 1024 and "64 KV blocks" in text and "128 snapshot slots" in text,
          f"a budget of {big} starts with 128 snapshot slots for 64 KV blocks and {rss_kib // 1024} MiB resident",
          failures)
    # the KV cache is accounted in the types of -ctk / -ctv
    def block_bytes(extra, name):
        srv = Server(args.server, m, ["--reprise", "strict", "--reprise-snapshot-bytes", "64M"] + extra,
                     args.workdir, name)
        srv.stop()
        with open(srv.log_path) as f:
            text = f.read()
        at = text.index("KV blocks of 32 tokens (")
        return int(text[at:].split("(")[1].split()[0])
    f16, f32 = block_bytes([], "kv-f16"), block_bytes(["-ctk", "f32", "-ctv", "f32"], "kv-f32")
    check(f32 == 2 * f16 > 0, f"a KV block is {f16} bytes in f16 and {f32} in f32 (-ctk f32 -ctv f32)", failures)
    # the KV budget counts the cached blocks beyond the slots' contexts: ten blocks' bytes, ten blocks
    srv = Server(args.server, m, ["--reprise", "strict", "--reprise-snapshot-bytes", "64M", "--reprise-kv-bytes",
                                  f"{10 * f16 + f16 // 2}"], args.workdir, "kv-budget")
    srv.stop()
    with open(srv.log_path) as f:
        text = f.read()
    check("42 KV blocks of 32 tokens" in text, "--reprise-kv-bytes of 10.5 KV blocks gives 32 + 10 KV blocks",
          failures)
    # /slots save, erase and restore work beside Reprise: a request after them is planned from Reprise's cache
    # (which neither knows nor needs the restored state) and answers as before
    srv = Server(args.server, m, slots(2) + ["--reprise", "strict", "--reprise-snapshot-bytes", "64M",
                                             "--slot-save-path", args.workdir], args.workdir, "slot-save")
    try:
        prompt = [4 + i % 120 for i in range(100)]
        first = srv.complete(prompt, 8, slot=0)
        saved = srv.post("/slots/0?action=save", {"filename": "slot0.bin"})
        erased = srv.post("/slots/0?action=erase", {})
        restored = srv.post("/slots/0?action=restore", {"filename": "slot0.bin"})
        again = srv.complete(prompt, 8, slot=0)
    finally:
        srv.stop()
    check(saved.get("n_saved", 0) > 0 and erased.get("n_erased", 0) > 0 and restored.get("n_restored", 0) > 0
          and output_of(again) == output_of(first) and again["timings"]["prompt_n"] < len(prompt),
          f"/slots save ({saved.get('n_saved')} tokens), erase and restore beside Reprise; the next request hits "
          f"({again['timings']['prompt_n']} of {len(prompt)} prompt tokens computed) and equals the first",
          failures)


def reprise_metrics(server):
    """Reprise's figures in /metrics (name without the llamacpp: prefix -> value)."""
    out = {}
    for x in get_json(server, "/metrics").splitlines():
        if x.startswith("llamacpp:reprise_"):
            name, value = x[len("llamacpp:"):].split()
            out[name] = float(value)
    return out


def write_lora(args, model, path, seed=7, rank=4):
    """A random LoRA adapter GGUF for `model` (every 2-D weight of its blocks: attention, recurrent and MLP
    projections), written with llama.cpp's own gguf-py, strong enough to change the model's outputs."""
    if os.path.exists(path):
        return path
    sys.path.insert(0, args.gguf_py)
    import numpy as np
    import gguf

    reader = gguf.GGUFReader(model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(rank))
    n = 0
    for t in reader.tensors:
        dims = [int(d) for d in t.shape]   # ggml order: ne0 (inputs), ne1 (outputs)
        if not t.name.startswith("blk.") or not t.name.endswith(".weight") or len(dims) != 2 or min(dims) < 8:
            continue
        n_in, n_out = dims
        writer.add_tensor(t.name[: -len(".weight")] + ".weight.lora_a",
                          (rng.standard_normal((rank, n_in)) * 0.3).astype(np.float32))
        writer.add_tensor(t.name[: -len(".weight")] + ".weight.lora_b",
                          (rng.standard_normal((n_out, rank)) * 0.3).astype(np.float32))
        n += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert n > 0, f"no 2-D block weight in {model}"
    return path


def test_adapters(args, model, arch, failures):
    """The adapters a request computes with are part of its key: the same prompt under a LoRA scale of 0, 1, 0.5
    (the request's `lora`) and the server's own scale (POST /lora-adapters): a request under a scale nothing was
    computed with computes its whole prompt and equals caching off under that scale bit for bit; under a scale
    that was, it hits and equals it too. Under chat a continued turn that changes the scale restores nothing. With
    the adapters left out of the key (fault 'adapters') the same checks fail."""
    adapter = write_lora(args, model, os.path.join(args.workdir, f"{arch}-lora.gguf"))
    lora = ["--lora", adapter]
    budget = ["--reprise-snapshot-bytes", SNAPSHOT_BYTES] if arch in HYBRID else []
    rng = random.Random(zlib.crc32(arch.encode()) + args.seed)
    prompt = [rng.randrange(4, 128) for _ in range(200)]
    n = 8

    def ask(server, tokens, scale, cache_prompt=True, slot=-1):
        body = {"prompt": tokens, "n_predict": n, "temperature": 0, "n_probs": 5, "return_tokens": True,
                "ignore_eos": True, "cache_prompt": cache_prompt, "id_slot": slot, "stream": False}
        if scale is not None:
            body["lora"] = [{"id": 0, "scale": scale}]
        r = server.post("/completion", body)
        return output_of(r), r["timings"]["prompt_n"]

    ref = Server(args.server, model, slots(1) + lora + ["--cache-ram", "0", "--ctx-checkpoints", "0"]
                 + long_context(arch), args.workdir, f"{arch}-lora-off")
    try:
        cold = {s: ask(ref, prompt, s, cache_prompt=False)[0] for s in (0.0, 1.0, 0.5)}
        # turn 2 of a conversation whose turn 1 ran at scale 0: its prompt, and its cold output at scale 1
        reply = cold[0.0][0]
        turn2 = prompt + list(reply) + [rng.randrange(4, 128) for _ in range(40)]
        cold_turn2 = ask(ref, turn2, 1.0, cache_prompt=False)[0]
    finally:
        ref.stop()
    if cold[0.0] == cold[1.0] or cold[1.0] == cold[0.5]:
        check(False, f"{arch}: the LoRA adapter changes the outputs (nothing tested otherwise)", failures)
        return
    # (scale in the request, or None: the server's own scale, set first by POST /lora-adapters; whether it must hit)
    plan = [(0.0, None, False), (1.0, None, False), (1.0, None, True), (0.5, None, False), (0.0, None, True),
            (None, 1.0, True), (None, 0.5, True)]
    for fault in (None, "adapters"):
        name = f"{arch}-lora-strict" + (f"-fault-{fault}" if fault else "")
        cand = Server(args.server, model, slots(2) + lora + ["--reprise", "strict"] + budget + long_context(arch),
                      args.workdir, name, env={"REPRISE_LLAMA_FAULT": fault} if fault else None)
        seen = []
        try:
            for scale, server_scale, hits in plan:
                if server_scale is not None:
                    cand.post("/lora-adapters", [{"id": 0, "scale": server_scale}])
                out, computed = ask(cand, prompt, scale)
                s = scale if scale is not None else server_scale
                seen.append((s, computed, hits, out == cold[s]))
        finally:
            cand.stop()
        good = all(equal and ((computed < len(prompt)) if hits else (computed == len(prompt)))
                   for _, computed, hits, equal in seen)
        figures = ", ".join(f"{s}: {c} computed{'' if e else ' DIFFERS'}" for s, c, _, e in seen)
        if fault is None:
            check(good, f"{arch}: LoRA scales as keys under strict (scale: prompt tokens computed of {len(prompt)}, "
                  f"equal to caching off at that scale unless marked): {figures}", failures)
        else:
            check(not good, f"{arch}: with the adapters left out of the key the same checks fail ({figures})",
                  failures)
    if arch not in HYBRID:
        return
    cand = Server(args.server, model, slots(2) + lora + ["--reprise", "chat"] + budget + long_context(arch),
                  args.workdir, f"{arch}-lora-chat")
    try:
        first, _ = ask(cand, prompt, 0.0, slot=0)
        out, computed = ask(cand, turn2, 1.0, slot=0)
    finally:
        cand.stop()
    check(first == cold[0.0] and computed == len(turn2) and out == cold_turn2,
          f"{arch}: chat: a continued turn that changes the LoRA scale restores nothing ({computed} of {len(turn2)} "
          f"prompt tokens computed) and equals caching off at its scale ({out == cold_turn2})", failures)


def write_projector(args, model, path, kind="mlp", seed=11):
    """A random multimodal projector GGUF for `model`, written with llama.cpp's own gguf-py in the format its clip
    loader reads: a vision tower of one encoder layer over 8x8-pixel patches whose projection is as wide as the
    text model. `kind` "mlp": LLaVA-style (64x64-pixel images, 64 tokens each, one position per token);
    "qwen2vl_merger": Qwen2-VL's (its 2x2 patch merger, images resized to at least 8 tokens), for a text model
    with M-RoPE positions, where an image of nx x ny tokens takes max(nx, ny) positions."""
    if os.path.exists(path):
        return path
    sys.path.insert(0, args.gguf_py)
    import numpy as np
    import gguf

    reader = gguf.GGUFReader(model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    n_embd_text = int(reader.fields[f"{arch}.embedding_length"].parts[-1][0])
    n_embd, n_ff, hidden, patch, size = 32, 64, 64, 8, 64
    qwen = kind == "qwen2vl_merger"
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", kind)
    w.add_bool("clip.use_gelu", True)
    for key, value in [("embedding_length", n_embd), ("feed_forward_length", n_ff), ("block_count", 1),
                       ("projection_dim", n_embd_text), ("attention.head_count", 2), ("image_size", size),
                       ("patch_size", patch)]:
        w.add_uint32(f"clip.vision.{key}", value)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def tensor(name, *shape, scale=0.5):  # numpy order: the last dimension is ggml's ne0
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))
    tensor("v.patch_embd.weight", n_embd, 3, patch, patch, scale=0.2)
    if qwen:  # the second frame's patch embedding (Qwen2-VL merges two frames; an image is both)
        tensor("v.patch_embd.weight.1", n_embd, 3, patch, patch, scale=0.2)
    else:
        tensor("v.position_embd.weight", (size // patch) ** 2, n_embd)
    # one encoder layer (LLaVA's graph stops before the last one, so there it never runs)
    for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
        tensor(f"v.blk.0.{name}.weight", n_embd, n_embd)
        if qwen:
            tensor(f"v.blk.0.{name}.bias", n_embd)
    for name in ("ln1", "ln2"):
        w.add_tensor(f"v.blk.0.{name}.weight", np.ones(n_embd, np.float32))
        w.add_tensor(f"v.blk.0.{name}.bias", np.zeros(n_embd, np.float32))
    tensor("v.blk.0.ffn_up.weight", n_ff, n_embd)
    tensor("v.blk.0.ffn_down.weight", n_embd, n_ff)
    # the projection: of each patch (LLaVA), of each 2x2 patches (Qwen2-VL's merger)
    tensor("mm.0.weight", hidden, 4 * n_embd if qwen else n_embd)
    tensor("mm.0.bias", hidden)
    tensor("mm.2.weight", n_embd_text, hidden, scale=1.0)
    tensor("mm.2.bias", n_embd_text)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def png(seed, n=8):
    """A random n x n RGB PNG (stb_image, which llama.cpp's mtmd decodes images with, reads it)."""
    rng = random.Random(seed)
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(3 * n)) for _ in range(n))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", n, n, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def token_spellings(n_vocab=128):
    """For each token id of test-llama-archs' vocabulary, five letters it tokenizes to: its tokenizer hashes each
    5-character piece of a text (h = 31 h + byte, modulo the vocabulary), so a text of these pieces tokenizes to
    exactly the tokens spelled, and a multimodal prompt (text around media markers) can continue a conversation
    token for token."""
    rng = random.Random(5)
    out = {}
    while len(out) < n_vocab:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5))
        h = 0
        for c in word.encode():
            h = h * 31 + c
        out.setdefault(h % n_vocab, word)
    return out


def test_media(args, models, failures):
    """Multimodal prompts (--mmproj, a random projector) under Reprise. Each image's tokens are keyed by
    its hash at its position: (a) under strict, the same prompt with another image at the same position computes
    everything past the text before it and equals caching off bit for bit; the same image again hits and equals it
    too; a prompt whose cached prefix ends inside the image skips only up to the image's start; (b) a text request
    and an image request (OpenAI chat API, a data: URI) over one system prompt share it; (c) under chat, turn 2 of
    a conversation with an image in turn 1 restores turn 1's end and equals a never-ending session. With the media
    left out of the key (fault 'media') (a) fails. Qwen3.5 runs with M-RoPE positions (an image's tokens share
    positions, so the tokens after it sit at fewer positions than indices)."""
    spell = token_spellings()
    text = lambda tokens: "".join(spell[t] for t in tokens)  # noqa: E731
    images = [base64.b64encode(png(seed)).decode() for seed in (1, 2)]
    for arch in ("nemotron_h", "qwen35", "llama"):
        if arch not in models:
            continue
        model = models[arch]
        # (qwen35's rope is M-RoPE: its image tokens share positions, nx x ny of them taking max(nx, ny))
        kind = "qwen2vl_merger" if arch == "qwen35" else "mlp"
        proj = ["--mmproj", write_projector(args, model, os.path.join(args.workdir, f"{arch}-{kind}-mmproj.gguf"),
                                            kind)]
        budget = ["--reprise-snapshot-bytes", SNAPSHOT_BYTES] if arch in HYBRID else []
        rng = random.Random(zlib.crc32(arch.encode()) + args.seed)
        system = [rng.randrange(4, 128) for _ in range(150)]
        tail = [rng.randrange(4, 128) for _ in range(100)]
        n = 8

        def ask(server, before, image, after, cache_prompt=True, slot=-1, n_predict=n):
            """/completion of text `before`, the image, text `after` (token lists); (output, prompt tokens,
            computed, generated tokens), the output None for a request the server failed."""
            if not hasattr(server, "media_marker"):  # (each server picks its own)
                server.media_marker = get_json(server, "/props")["media_marker"]
            marker = server.media_marker
            body = {"prompt": {"prompt_string": text(before) + marker + text(after), "multimodal_data": [image]},
                    "n_predict": n_predict, "temperature": 0, "n_probs": 5, "return_tokens": True,
                    "ignore_eos": True, "cache_prompt": cache_prompt, "id_slot": slot, "stream": False}
            try:
                r = server.post("/completion", body)
            except urllib.error.HTTPError as e:
                print(f"     {arch}: media: the server answered HTTP {e.code}: {e.read().decode(errors='replace')}",
                      flush=True)
                return None, 0, -1, []
            return output_of(r), r["tokens_evaluated"], r["timings"]["prompt_n"], r["tokens"]

        def chat(server, user, image, cache_prompt=True):
            """/v1/chat/completions over the system prompt's text; `image`: one between the user text's halves."""
            content = user if image is None else [
                {"type": "text", "text": user[: len(user) // 2]},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}},
                {"type": "text", "text": user[len(user) // 2:]}]
            r = server.post("/v1/chat/completions", {
                "messages": [{"role": "system", "content": text(system)}, {"role": "user", "content": content}],
                "max_tokens": n, "temperature": 0, "logprobs": True, "top_logprobs": 5, "ignore_eos": True,
                "cache_prompt": cache_prompt})
            return (r["choices"][0]["message"], r["choices"][0]["logprobs"]), r["usage"]["prompt_tokens"], \
                r["timings"]["prompt_n"]

        short = tail[:5]
        user_text = text(tail[:40])
        ref = Server(args.server, model, slots(1) + proj + ["--cache-ram", "0", "--ctx-checkpoints", "0"]
                     + long_context(arch), args.workdir, f"{arch}-media-off")
        try:
            # (with the tokens a prompt starts with, e.g. BOS, as a multimodal prompt's text is tokenized)
            ref_prefix = ref.post("/tokenize", {"content": text(system), "add_special": True})["tokens"]
            check(ref.tokenize(text(system)) == system and ref_prefix[len(ref_prefix) - len(system):] == system,
                  f"{arch}: media: the spelled text tokenizes to its tokens", failures)
            cold = {i: ask(ref, system, images[i], tail, cache_prompt=False) for i in (0, 1)}
            cold_short = ask(ref, system, images[1], short, cache_prompt=False)
            cold_text = chat(ref, user_text[: len(user_text) // 2], None, cache_prompt=False)
            cold_image = chat(ref, user_text, images[0], cache_prompt=False)
        finally:
            ref.stop()
        if cold[0][0] == cold[1][0]:
            check(False, f"{arch}: media: the two images change the outputs (nothing tested otherwise)", failures)
            continue
        length = cold[0][1]
        start = len(ref_prefix)  # the image's first token
        n_image = length - start - len(tail)
        for fault in (None, "media"):
            name = f"{arch}-media-strict" + (f"-fault-{fault}" if fault else "")
            cand = Server(args.server, model, slots(2) + proj + ["--reprise", "strict"] + budget + long_context(arch),
                          args.workdir, name, env={"REPRISE_LLAMA_FAULT": fault} if fault else None)
            try:
                a = ask(cand, system, images[0], tail)
                b = ask(cand, system, images[1], tail)
                b2 = ask(cand, system, images[1], tail)
                inside = ask(cand, system, images[1], short)
                # its prompt's last point on the alignment grid lies inside the image: no state there is captured,
                # so the same prompt again restores where it did
                inside_again = ask(cand, system, images[1], short)
                # (the text request's user message is the image request's text before the image: under strict a
                # hybrid captures its prompt's last point on the alignment grid, which then lies before the image)
                t = chat(cand, user_text[: len(user_text) // 2], None) if fault is None else None
                i = chat(cand, user_text, images[0]) if fault is None else None
            finally:
                cand.stop()
            figures = (f"prompt tokens computed of {length}: image A {a[2]}, image B at its position {b[2]}, "
                       f"image B again {b2[2]} (the image's {n_image} tokens start at {start})")
            good = (a[0] == cold[0][0] and b[0] == cold[1][0] and b2[0] == cold[1][0] and b[2] >= length - start
                    and b2[2] < length - start - n_image)
            if fault is not None:
                check(not good, f"{arch}: media: with the media left out of the key the strict checks fail "
                      f"({figures}; B equals caching off: {b[0] == cold[1][0]})", failures)
                continue
            check(good, f"{arch}: media: strict: {figures}; each equals caching off with its image", failures)
            check(inside[0] == cold_short[0] and inside_again[0] == cold_short[0] and inside_again[2] == inside[2]
                  and length - start - len(tail) + len(short) <= inside[2] < inside[1],
                  f"{arch}: media: a cached prefix ending inside the image skips at most up to its start "
                  f"({inside[2]} of {inside[1]} prompt tokens computed, the image's {n_image} from {start}; "
                  f"again: {inside_again[2]}) and equals caching off", failures)
            check(t[0] == cold_text[0] and i[0] == cold_image[0] and i[2] < i[1],
                  f"{arch}: media: chat API: an image request after a text request over one system prompt shares it "
                  f"({i[2]} of {i[1]} prompt tokens computed; the text request {t[2]} of {t[1]}), each equal to "
                  f"caching off", failures)
        if arch not in HYBRID:
            continue
        # chat: turn 2 continues turn 1 (its image, its reply) token for token
        session = Server(args.server, model, slots(1) + proj + ["--cache-ram", "0", "--ctx-checkpoints", "0"]
                         + long_context(arch), args.workdir, f"{arch}-media-session")
        try:
            cand = Server(args.server, model, slots(2) + proj + ["--reprise", "chat"] + budget + long_context(arch),
                          args.workdir, f"{arch}-media-chat")
            try:
                user2 = [rng.randrange(4, 128) for _ in range(30)]
                ref1 = ask(session, system, images[0], short, slot=0)
                got1 = ask(cand, system, images[0], short)
                after = short + list(got1[3]) + user2
                ref2 = ask(session, system, images[0], after, slot=0)
                got2 = ask(cand, system, images[0], after)
            finally:
                cand.stop()
        finally:
            session.stop()
        end = got1[1] + len(got1[3]) - 1  # turn 1's end: its last generated token is never fed
        check(got1[0] == ref1[0] and got2[0] == ref2[0] and got2[2] == got2[1] - end,
              f"{arch}: media: chat: turn 2 of a conversation with an image in turn 1 restores turn 1's end "
              f"({got2[2]} of {got2[1]} prompt tokens computed, {got2[1] - end} past it) and equals a never-ending "
              f"session", failures)


def test_admit_failures(args, models, failures):
    """A hit that fails while it is set up (a cached block without its copy, libllama refusing to copy cells into
    the slot's stream, a snapshot restore refused: injected once each) ends that request with HTTP 500 and loses
    nothing: the cache holds the same blocks and snapshots after it, and the same prompt then hits and answers
    as the cold request did."""
    m = models["nemotron_h"]
    prompt = [4 + (i * 7) % 120 for i in range(100)]
    for fault in ("lost", "kv-refused", "restore-refused"):
        srv = Server(args.server, m, slots(2) + ["--reprise", "strict", "--reprise-snapshot-bytes", SNAPSHOT_BYTES,
                                                 "--metrics"], args.workdir, f"admit-{fault}",
                     env={"REPRISE_LLAMA_FAULT": fault})
        try:
            cold = srv.complete(prompt, 8, slot=0)
            before = reprise_metrics(srv)
            try:
                srv.complete(prompt, 8, slot=1)  # a hit copied into the other slot's stream: fails
                status, body = 200, ""
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read().decode(errors="replace")
            after = reprise_metrics(srv)
            again = srv.complete(prompt, 8, slot=1)
        finally:
            srv.stop()
        kept = ("reprise_kv_cells_kept", "reprise_snapshot_bytes", "reprise_snapshot_restores_total",
                "reprise_captures_total")
        check(status == 500 and "Reprise: " in body and all(before.get(k) == after.get(k) for k in kept)
              and before.get("reprise_kv_cells_kept", 0) > 0 and again["timings"]["prompt_n"] < len(prompt)
              and output_of(again) == output_of(cold),
              f"a hit failing at admit ({fault}) answers HTTP {status} with Reprise's message and keeps the cache "
              f"({', '.join(f'{k[8:]} {before.get(k)} -> {after.get(k)}' for k in kept)}); the same prompt then "
              f"computes {again['timings']['prompt_n']} of {len(prompt)} tokens and equals the cold request",
              failures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--archs", required=True, help="llama.cpp's test-llama-archs (writes the random models)")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--only", default="strict,chat,branch,faults,spec,keys,errors,media")
    ap.add_argument("--gguf-py", help="llama.cpp's gguf-py (writes LoRA adapters and projectors; default: beside "
                    "the server's build folder)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seed", type=int, default=0, help="added to each model's workload seed")
    args = ap.parse_args()
    args.only = set(args.only.split(","))
    if args.gguf_py is None:   # <llama.cpp>/<build>/bin/llama-server
        args.gguf_py = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.server)))),
                                    "gguf-py")
    os.makedirs(args.workdir, exist_ok=True)
    models = {}
    for arch in args.models.split(",") + (["mamba"] if "errors" in args.only else []):
        # test-llama-archs writes ARCH-dense.gguf, or ARCH-moe.gguf for an architecture that is MoE only
        paths = [os.path.join(args.workdir, f"{arch}-{kind}.gguf") for kind in ("dense", "moe")]
        if not any(os.path.exists(p) for p in paths):
            subprocess.run([args.archs, "-a", arch, "-o", args.workdir, "-s", "42"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        models[arch] = next(p for p in paths if os.path.exists(p))
    failures = []
    t0 = time.time()
    if "errors" in args.only:
        test_errors(args, models, failures)
        test_admit_failures(args, models, failures)
    if "media" in args.only:
        test_media(args, models, failures)
    for arch in args.models.split(","):
        if "defaults" in args.only:
            measure_defaults(args, models[arch], arch)
        test_exactness(args, models[arch], arch, failures)
        if "spec" in args.only:
            test_speculative(args, models[arch], arch, failures)
        if "keys" in args.only:
            test_adapters(args, models[arch], arch, failures)
    print(f"{len(failures)} failure(s) in {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
