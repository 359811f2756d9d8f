# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Multi-turn chat through a minimal engine loop, with Reprise's prefix cache and without it.

The engine owns the memory (a KV pool indexed by block id, recurrent slot pools indexed by slot: the cache's
snapshot slots, then one live slot); Reprise owns the ids and decides what to reuse. One turn:

1. ``admit`` plans the prompt: block table, tokens to skip, a snapshot to restore, states to capture;
2. restore the snapshot into the live slot (``ops.copy_units``), prefill the rest, writing the captures;
3. ``commit`` publishes the full blocks and written snapshots; decode with ``extend`` + ``commit``;
4. ``finish`` (copying the live state into an end-of-turn snapshot slot when the policy plans one);
5. ``step_complete`` after every scheduler step (this engine runs synchronously).

Run ``python chat.py``: it serves the same conversations with caching off and with each hybrid policy and
checks that every decoded token and the final logits are bitwise those of the caching-off run.
"""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import numpy as np

import reprise
from tiny_hybrid import BLOCK, VOCAB, Memory, TinyHybrid, model_config


class Uncached:
    """Caching off: fresh blocks for every sequence, nothing skipped, nothing shared. Same calls as PrefixCache."""

    snapshot_slots = 0

    def __init__(self, kv_blocks: int):
        self.free, self.lengths, self.tables = list(range(kv_blocks)), {}, {}

    def admit(self, seq, tokens):
        n = len(tokens)
        self.tables[seq], self.lengths[seq] = [self.free.pop() for _ in range(-(-n // BLOCK))], n
        return SimpleNamespace(block_table=np.array(self.tables[seq], np.int32), usable_tokens=0,
                               kv_matched_tokens=0, restore_slot=-1, captures=np.zeros((0, 2), np.int64))

    def extend(self, seq, tokens):
        self.lengths[seq] += len(tokens)
        new = [self.free.pop() for _ in range(-(-self.lengths[seq] // BLOCK) - len(self.tables[seq]))]
        self.tables[seq] += new
        return SimpleNamespace(new_blocks=np.array(new, np.int32))

    def commit(self, seq, n, written=None):
        pass

    def finish(self, seq):
        self.free += self.tables.pop(seq)
        return SimpleNamespace(capture_slot=-1)

    def step_complete(self, step):
        pass

    def current_epoch(self):
        return 0


class Engine:
    def __init__(self, model: TinyHybrid, cache, kv_blocks: int):
        self.model, self.cache = model, cache
        self.live = cache.snapshot_slots  # slots [0, snapshot_slots) belong to the cache
        self.mem = Memory(kv_blocks, cache.snapshot_slots + 1)
        self.prefill_tokens = self.skipped_tokens = 0

    def step_done(self):
        self.cache.step_complete(self.cache.current_epoch())

    def turn(self, seq: int, prompt: list[int], new_tokens: int):
        """Serves one turn; returns the decoded tokens and the logits that chose the last one."""
        plan = self.cache.admit(seq, prompt)
        u, table = plan.usable_tokens, plan.block_table
        if plan.restore_slot >= 0:
            self.mem.copy_slots([[plan.restore_slot, self.live]])
        else:
            self.reset_live()  # start from the zero state
        logits = self.model.forward(prompt[u:], u, table, plan.kv_matched_tokens, self.live, self.mem, plan.captures)
        self.cache.commit(seq, len(prompt), plan.captures[:, 0])
        self.prefill_tokens += len(prompt) - u
        self.skipped_tokens += u
        self.step_done()
        out, length = [], len(prompt)
        while True:
            out.append(int(np.argmax(logits)))
            if len(out) == new_tokens:
                break
            table = np.concatenate([table, self.cache.extend(seq, [out[-1]]).new_blocks])
            logits = self.model.forward([out[-1]], length, table, length, self.live, self.mem, decode=True)
            length += 1
            self.cache.commit(seq, length)
            self.step_done()
        finished = self.cache.finish(seq)
        if finished.capture_slot >= 0:  # end-of-turn snapshot of the live state
            self.mem.copy_slots([[self.live, finished.capture_slot]])
        self.step_done()
        return out, logits

    def reset_live(self):
        for pool in (self.mem.m_conv, self.mem.m_ssm, self.mem.g_conv, self.mem.g_state):
            pool[self.live] = 0


def conversations(n: int = 3, turns: int = 3, seed: int = 7):
    """A shared system prompt, then per conversation one user message per turn."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, 200).tolist()
    users = [[rng.integers(0, VOCAB, int(rng.integers(30, 90))).tolist() for _ in range(turns)] for _ in range(n)]
    return system, users


def serve(cache, kv_blocks: int, reply_tokens: int = 6, model: TinyHybrid | None = None):
    """Serves every conversation turn by turn (round-robin over conversations); returns the outputs and engine."""
    engine = Engine(model or TinyHybrid(), cache, kv_blocks)
    system, users = conversations()
    history = [list(system) for _ in users]
    outputs = []
    for t in range(len(users[0])):
        for c, msgs in enumerate(users):
            history[c] += msgs[t]
            tokens, logits = engine.turn(seq=100 * c + t, prompt=history[c], new_tokens=reply_tokens)
            history[c] += tokens
            outputs.append((tokens, logits))
    return outputs, engine


def same(a, b) -> bool:
    return all(x[0] == y[0] and x[1].tobytes() == y[1].tobytes() for x, y in zip(a, b)) and len(a) == len(b)


def main() -> int:
    config, kv_blocks = model_config(), 512
    start = time.perf_counter()
    baseline, off = serve(Uncached(kv_blocks), kv_blocks)
    print(f"{'caching':<24}{'prefill':>9}{'skipped':>9}  identical   seconds")
    print(f"{'off':<24}{off.prefill_tokens:>9}{off.skipped_tokens:>9}  -{time.perf_counter() - start:>15.2f}")
    ok = True
    for policy in ("snapshot_prefill_exact", "memory_only"):
        start = time.perf_counter()
        cache = reprise.PrefixCache(config, policy, kv_blocks=kv_blocks,
                                    snapshot_budget_bytes=16 * config.bytes_per_snapshot)
        outputs, on = serve(cache, kv_blocks)
        cache.check_invariants()
        identical = same(outputs, baseline)
        ok &= identical
        print(f"{policy:<24}{on.prefill_tokens:>9}{on.skipped_tokens:>9}  {str(identical):<9}"
              f"{time.perf_counter() - start:>8.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
