# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Multi-turn chat through a minimal engine loop, with Reprise's prefix cache and without it.

The engine owns the memory (a KV pool indexed by block id, recurrent slot pools indexed by slot: the cache's
snapshot slots, then one live slot); Reprise owns the ids and decides what to reuse. One turn:

1. ``admit`` plans the prompt: block table, tokens to skip, a snapshot to restore, states to capture;
2. restore the snapshot into the live slot (``ops.copy_units``), copy a turn end's partial block into the
   sequence's own (``copy_src`` -> ``copy_dst``), prefill the rest, writing the captures;
3. ``commit`` publishes the full blocks and written snapshots; decode with ``extend`` + ``commit``;
4. ``finish`` (copying the live state into an end-of-turn snapshot slot when the policy plans one);
5. ``step_complete`` after every scheduler step (this engine runs synchronously).

With a host tier (``PrefixCache(..., host_kv_budget_bytes=...)``) the engine also owns host pools shaped like
its GPU pools, and after every cache call runs the moves ``take_transfers`` lists (``ops.transfer_units``):
offloads of what the GPU pools evicted, then onboards of what a prompt found in host memory, before the
restore, copy and prefill that call planned.

Run ``python chat.py``: it serves the same conversations with caching off and with each hybrid policy and
checks that every decoded token and the final logits are bitwise those of the caching-off run; then with
``chat`` through GPU pools far too small for them, with a host tier below, and checks the outputs are bitwise
those of ``chat`` with GPU memory to spare.
"""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import numpy as np

import reprise
from reprise import ops
from tiny_hybrid import BLOCK, CHUNK, VOCAB, Memory, TinyHybrid, model_config


class Uncached:
    """Caching off: fresh blocks for every sequence, nothing skipped, nothing shared. Same calls as PrefixCache."""

    snapshot_slots = 0

    def __init__(self, kv_blocks: int):
        self.free, self.lengths, self.tables = list(range(kv_blocks)), {}, {}

    def admit(self, seq, tokens):
        n = len(tokens)
        self.tables[seq], self.lengths[seq] = [self.free.pop() for _ in range(-(-n // BLOCK))], n
        return SimpleNamespace(block_table=np.array(self.tables[seq], np.int32), usable_tokens=0,
                               kv_matched_tokens=0, restore_slot=-1, restore_from_host=False, copy_src=-1,
                               copy_dst=-1, captures=np.zeros((0, 2), np.int64))

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
        # The host tier's pools, shaped like the GPU ones: host KV units and host snapshot units (None without).
        host_kv = getattr(cache, "host_kv_units", 0)
        self.host = Memory(host_kv, cache.host_snapshot_units) if host_kv else None
        self.prefill_tokens = self.skipped_tokens = 0

    def step_done(self):
        self.cache.step_complete(self.cache.current_epoch())

    def run_transfers(self):
        """The host tier's moves that the last cache call planned, in the order the cache requires: offloads
        (GPU -> host: the GPU units were handed out again, so their old bytes are read first), then onboards
        (host -> GPU), all before the work the call planned."""
        if self.host is None:
            return
        t = self.cache.take_transfers()
        for src, dst, pairs in ((self.mem.kv_pools(), self.host.kv_pools(), t.kv_offload),
                                (self.mem.state_pools(), self.host.state_pools(), t.snapshot_offload),
                                (self.host.kv_pools(), self.mem.kv_pools(), t.kv_onboard)):
            if len(pairs):
                ops.transfer_units(src, dst, pairs)

    def restore_from_host(self, unit: int):
        """Copies host snapshot unit `unit` straight into the live state."""
        ops.transfer_units(self.host.state_pools(), self.mem.state_pools(), np.array([[unit, self.live]], np.int32))

    def prefill(self, prompt: list[int], u: int, table: np.ndarray, kv_from: int, captures: np.ndarray):
        """Computes prompt[u:], writing the captures; returns the last token's logits. The kernels write captures
        on their chunk grid; a capture off it ('chat': the last shared KV block) ends a prefill piece, and the
        live state is copied into its slot there."""
        start, on_grid, logits = u, [], None
        for position, slot in captures.tolist():
            if position % CHUNK == 0:
                on_grid.append((position, slot))
                continue
            logits = self.model.forward(prompt[start:position], start, table, kv_from, self.live, self.mem,
                                        np.array(on_grid, np.int64).reshape(-1, 2))
            self.mem.copy_slots([[self.live, slot]])
            start, on_grid = position, []
        if start < len(prompt):
            logits = self.model.forward(prompt[start:], start, table, kv_from, self.live, self.mem,
                                        np.array(on_grid, np.int64).reshape(-1, 2))
        return logits

    def turn(self, seq: int, prompt: list[int], new_tokens: int):
        """Serves one turn; returns the decoded tokens and the logits that chose the last one."""
        plan = self.cache.admit(seq, prompt)
        self.run_transfers()  # before the restore, the copy and the prefill read or write the units it moved
        u, table = plan.usable_tokens, plan.block_table
        if plan.restore_slot >= 0 and plan.restore_from_host:
            self.restore_from_host(plan.restore_slot)
        elif plan.restore_slot >= 0:
            self.mem.copy_slots([[plan.restore_slot, self.live]])
        else:
            self.reset_live()  # start from the zero state
        if plan.copy_src >= 0:  # a turn end kept off a block boundary: copy on write of its partial block
            self.mem.copy_blocks([[plan.copy_src, plan.copy_dst]])
        logits = self.prefill(prompt, u, table, plan.kv_matched_tokens, plan.captures)
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
            self.run_transfers()  # a block it took may have been offloaded: before the forward pass writes it
            logits = self.model.forward([out[-1]], length, table, length, self.live, self.mem, decode=True)
            length += 1
            self.cache.commit(seq, length)
            self.step_done()
        finished = self.cache.finish(seq)
        self.run_transfers()  # the slot it took may have been offloaded: before the capture overwrites it
        if finished.capture_slot >= 0:  # end-of-turn snapshot of the live state
            self.mem.copy_slots([[self.live, finished.capture_slot]])
        self.step_done()
        return out, logits

    def reset_live(self):
        for pool in (self.mem.m_conv, self.mem.m_ssm, self.mem.g_conv, self.mem.g_state):
            pool[self.live] = 0


def conversations(n: int = 3, turns: int = 3, seed: int = 7, system_tokens: int = 200):
    """A shared system prompt, then per conversation one user message per turn."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, system_tokens).tolist()
    users = [[rng.integers(0, VOCAB, int(rng.integers(30, 90))).tolist() for _ in range(turns)] for _ in range(n)]
    return system, users


def serve(cache, kv_blocks: int, reply_tokens: int = 6, model: TinyHybrid | None = None, system_tokens: int = 200):
    """Serves every conversation turn by turn (round-robin over conversations); returns the outputs and engine."""
    engine = Engine(model or TinyHybrid(), cache, kv_blocks)
    system, users = conversations(system_tokens=system_tokens)
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
    for policy in ("strict", "memory_only"):
        start = time.perf_counter()
        cache = reprise.PrefixCache(config, policy, kv_blocks=kv_blocks,
                                    snapshot_budget_bytes=16 * config.bytes_per_snapshot)
        outputs, on = serve(cache, kv_blocks)
        cache.check_invariants()
        identical = same(outputs, baseline)
        ok &= identical
        print(f"{policy:<24}{on.prefill_tokens:>9}{on.skipped_tokens:>9}  {str(identical):<9}"
              f"{time.perf_counter() - start:>8.2f}")

    # 'chat' continues sessions from decode-continuation state, so its reference is 'chat' itself with GPU
    # memory to spare; with tiny GPU pools the host tier must bring back everything they evict.
    spare, _ = serve(chat_cache(config, kv_blocks, 16), kv_blocks)
    start = time.perf_counter()
    cache = chat_cache(config, TINY_KV_BLOCKS, 1, host_blocks=kv_blocks, host_snapshots=16)
    outputs, on = serve(cache, TINY_KV_BLOCKS)
    cache.check_invariants()
    identical = same(outputs, spare)
    ok &= identical
    print(f"{'chat, host tier':<24}{on.prefill_tokens:>9}{on.skipped_tokens:>9}  {str(identical):<9}"
          f"{time.perf_counter() - start:>8.2f}  (vs chat with GPU memory to spare)")
    return 0 if ok else 1


TINY_KV_BLOCKS = 34  # GPU blocks: one conversation's history fits, three do not


def chat_cache(config, kv_blocks: int, snapshots: int, host_blocks: int = 0, host_snapshots: int = 0):
    """A 'chat' cache; with host_blocks, host memory for that many KV blocks and host_snapshots snapshots below
    the GPU pools."""
    return reprise.PrefixCache(config, "chat", kv_blocks=kv_blocks, hasher_seed=1,
                               snapshot_budget_bytes=snapshots * config.bytes_per_snapshot,
                               host_kv_budget_bytes=host_blocks * config.bytes_per_kv_block,
                               host_snapshot_budget_bytes=host_snapshots * config.bytes_per_snapshot)


if __name__ == "__main__":
    sys.exit(main())
