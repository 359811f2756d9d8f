#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""A model of turn-end snapshot eviction on a chat trace, outside the cache.

Each request that continues an earlier one (a `from` segment) needs that request's turn end; a miss costs the
earlier request's prompt + output - 1 tokens (the conversation is recomputed). Each request leaves its own turn
end; restoring a turn end frees its slot (the next turn end supersedes it). Branch snapshots of system prompts
are left out (they would take a few slots off K). Prints the tokens lost per slot count and eviction order:
LRU, Belady (clairvoyant), "costW" (evict the shallowest of the W least recently used), GreedyDual-Size, and
LRU with last-turn hints (a conversation's last turn end is never captured).

Usage: python3 bench/chat_eviction_model.py TRACE.jsonl [K ...]
"""

import json
import sys


def load(path):
    length, events = {}, []
    for line in open(path):
        r = json.loads(line)
        if "id" not in r:
            continue
        total = 0
        for s in r["segments"]:
            if "pool" in s:
                total += s["len"]
            elif "fresh" in s:
                total += s["fresh"]
            else:
                total += s.get("len", sum(length[s["from"]]))
        length[r["id"]] = (total, r["output"])
        first = r["segments"][0]
        need = first["from"] if "from" in first else None
        cost = sum(length[need]) - 1 if need is not None else 0
        events.append((need, cost, r["id"]))
    uses = {}
    for i, (need, _, _) in enumerate(events):
        if need is not None:
            uses.setdefault(need, []).append(i)
    return length, events, uses


def lost(length, events, uses, k, order):
    cache, total, floor_l = {}, 0, 0.0  # id -> (last use, value, greedy-dual priority)
    for i, (need, cost, new) in enumerate(events):
        if need is not None:
            if need in cache:
                del cache[need]
            else:
                total += cost
        if order == "hints" and new not in uses:
            continue
        if len(cache) >= k:
            if order in ("lru", "hints"):
                victim = min(cache, key=lambda x: cache[x][0])
            elif order == "belady":
                victim = max(cache, key=lambda x: next((j for j in uses.get(x, []) if j > i), float("inf")))
            elif order.startswith("cost"):
                window = sorted(cache, key=lambda x: cache[x][0])[: int(order[4:])]
                victim = min(window, key=lambda x: cache[x][1])
            else:  # gds
                victim = min(cache, key=lambda x: cache[x][2])
                floor_l = cache[victim][2]
            del cache[victim]
        value = sum(length[new])
        cache[new] = (i, value, floor_l + value)
    return total


def main():
    length, events, uses = load(sys.argv[1])
    sizes = [int(x) for x in sys.argv[2:]] or [34, 42, 55, 76]
    orders = ["lru", "belady", "cost4", "cost8", "cost16", "gds", "hints"]
    print("slots  " + "  ".join(f"{o:>9}" for o in orders) + "   (tokens lost)")
    for k in sizes:
        print(f"{k:5}  " + "  ".join(f"{lost(length, events, uses, k, o):9}" for o in orders))


if __name__ == "__main__":
    main()
