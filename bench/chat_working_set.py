#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The working set of a chat trace: what a cache must hold to lose nothing to eviction.

After each request, a conversation is live when it has had a request and will have another. What its next
turn reuses is its context so far (the prompt + output of its latest request, which includes its system
prompt) and its turn end. Shared system prompts (pool segments at position 0) are counted once however many
live conversations start with them, and each needs one branch snapshot. So, after request i:

    KV tokens  = sum over live conversations of (context - system prompt) + sum of the distinct system prompts
    snapshots  = live conversations + distinct system prompts in use

Prints the mean and the peak over the trace, in tokens and snapshots, and in bytes for a model given as
`--kv-bytes-per-token` and `--snapshot-bytes` (Nemotron-H-8B by default: 256 KiB per 16-token block, 97.4 MiB
per snapshot). A GPU budget of 1/10 of the mean working set is "traffic ~10x what fits".

Usage: python3 bench/chat_working_set.py TRACE.jsonl [--kv-bytes-per-token N] [--snapshot-bytes N]
"""

import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--kv-bytes-per-token", type=int, default=256 * 1024 // 16)
    ap.add_argument("--snapshot-bytes", type=int, default=102137856)
    a = ap.parse_args()

    pools, length, session_of, system_of, requests = {}, {}, {}, {}, []
    for line in open(a.trace):
        if not line.strip():
            continue
        r = json.loads(line)
        if "pool" in r:
            pools[r["pool"]] = r["random"] if "random" in r else len(r["tokens"])
            continue
        rid = r.get("id", len(requests))
        total, segments = 0, r.get("segments", [{"tokens": r.get("tokens", [])}])
        for s in segments:
            if "pool" in s:
                total += s.get("len", pools[s["pool"]] - s.get("off", 0))
            elif "fresh" in s:
                total += s["fresh"]
            elif "tokens" in s:
                total += len(s["tokens"])
            else:
                total += s.get("len", sum(length[s["from"]]))
        length[rid] = (total, r.get("output", 0))
        session = r.get("session", str(rid))
        first = segments[0]
        if "pool" in first:
            system_of[session] = (first["pool"], first.get("len", pools[first["pool"]] - first.get("off", 0)))
        session_of[rid] = session
        requests.append(rid)

    last = {}
    for i, rid in enumerate(requests):
        last[session_of[rid]] = i
    context = {}  # live conversation -> tokens of its latest request (prompt + output)
    kv_sum = snap_sum = 0
    kv_peak = snap_peak = 0
    for i, rid in enumerate(requests):
        session = session_of[rid]
        context[session] = sum(length[rid])
        if last[session] == i:
            del context[session]
        systems = {system_of[s] for s in context if s in system_of}
        kv = sum(c - (system_of[s][1] if s in system_of else 0) for s, c in context.items())
        kv += sum(n for _, n in systems)
        snaps = len(context) + len(systems)
        kv_sum += kv
        snap_sum += snaps
        kv_peak = max(kv_peak, kv)
        snap_peak = max(snap_peak, snaps)
    n = len(requests)
    kv_mean, snap_mean = kv_sum / n, snap_sum / n
    gib = 1 << 30
    print(f"requests {n}, conversations {len(last)}")
    print(f"KV working set: mean {kv_mean:.0f} tokens ({kv_mean * a.kv_bytes_per_token / gib:.2f} GiB), "
          f"peak {kv_peak} tokens ({kv_peak * a.kv_bytes_per_token / gib:.2f} GiB)")
    print(f"snapshot working set: mean {snap_mean:.1f} ({snap_mean * a.snapshot_bytes / gib:.2f} GiB), "
          f"peak {snap_peak} ({snap_peak * a.snapshot_bytes / gib:.2f} GiB)")
    print(f"1/10 of the mean: KV {kv_mean * a.kv_bytes_per_token / 10 / (1 << 20):.0f} MiB, "
          f"snapshots {snap_mean / 10:.1f} ({snap_mean * a.snapshot_bytes / 10 / (1 << 20):.0f} MiB)")


if __name__ == "__main__":
    main()
