# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Turn ends in the remote store from Python (remote_turn_ends): a conversation's turn end (its snapshot, the
decode-filled blocks before it, its partial block) goes to the store as one 'turn_end' value, and another
engine continues the conversation from it bitwise as the writer would have, had the session stayed alive there.

Each Process stands for an engine: a 'chat' cache with host and remote tiers, and numpy pools (one row per
unit) whose bytes are a function of how they were computed: the state restored, the tokens since and whether
a prefill, a decode step or a turn-end capture wrote them. A reader that mixed two computations, or
recomputed, shows different bytes. The store is a dict of key -> (header, payload)."""

import hashlib
from typing import NamedTuple, Optional

import numpy as np
import pytest

import reprise
from conftest import hybrid_config

B = 16
U = 32  # the test's stand-in for the bytes of one KV block or one snapshot


def tokens(n, start):
    return list(range(start, start + n))


def computed(base, toks, start, end, who):
    """The bytes a computation writes: from the state `base` (a hash of the restored bytes, 0 for none), folding
    in toks[start:end], ending at `end`, written by `who`."""
    h = hashlib.blake2b(digest_size=U)
    h.update(f"{base}|{who}|{end}|".encode())
    h.update(np.asarray(toks[start:end], dtype=np.int32).tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8)


def same(units, others):
    return len(units) == len(others) and all((a == b).all() for a, b in zip(units, others))


def hash_of(unit):
    return int.from_bytes(hashlib.blake2b(unit.tobytes(), digest_size=8).digest(), "little")


class Turn(NamedTuple):
    plan: reprise.AdmitPlan
    restored: list  # the KV blocks under usable_tokens as the GPU pool holds them when the prefill starts
    kv: list  # every KV block of the conversation when the turn ended (the partial one last)
    turn_end: Optional[np.ndarray]  # the turn-end snapshot, or None


class Process:
    def __init__(self, turn_ends=True, writer_id=0, kv_blocks=48):
        config = hybrid_config()
        self.cache = reprise.PrefixCache(
            config, "chat", kv_blocks=kv_blocks, hasher_seed=5,
            snapshot_budget_bytes=4 * config.bytes_per_snapshot,
            host_kv_budget_bytes=40 * config.bytes_per_kv_block,
            host_snapshot_budget_bytes=4 * config.bytes_per_snapshot,
            remote_fleet_seed=7, remote_revision="weights-1", remote_write_through=True,
            remote_turn_ends=turn_ends, remote_writer_id=writer_id)
        c = self.cache
        self.gpu_kv = np.zeros((c.kv_blocks, U), np.uint8)
        self.gpu_slots = np.zeros((c.snapshot_slots, U), np.uint8)
        self.host_kv = np.zeros((c.host_kv_units, U), np.uint8)
        self.host_slots = np.zeros((c.host_snapshot_units, U), np.uint8)
        self.turn_end_puts = []
        self.probed_turn_ends = 0

    def run_transfers(self, store):
        """Takes the transfers: puts go to `store` first (a turn end gathered from its GPU units), then the
        offloads, then the onboards."""
        t = self.cache.take_transfers()
        for p in t.remote_puts:
            if p.item == "turn_end":
                assert p.device and p.kv_units
                parts = [np.zeros(U, np.uint8) if u == reprise.NO_UNIT else self.gpu_kv[u] for u in p.kv_units]
                payload = np.concatenate(parts + [self.gpu_slots[p.unit]]).tobytes()
                self.turn_end_puts.append(p)
            else:
                assert p.kv_units == []
                pools = (self.gpu_kv, self.gpu_slots) if p.device else (self.host_kv, self.host_slots)
                payload = pools[p.item == "snapshot"][p.unit].tobytes()
            store[p.key] = (p.header, payload)
        self.host_kv[t.kv_offload[:, 1]] = self.gpu_kv[t.kv_offload[:, 0]]
        self.host_slots[t.snapshot_offload[:, 1]] = self.gpu_slots[t.snapshot_offload[:, 0]]
        self.gpu_kv[t.kv_onboard[:, 1]] = self.host_kv[t.kv_onboard[:, 0]]

    def prefetch(self, prompt, store, tamper=None):
        """Probes `prompt`, prefetches what `store` has and answers every fetch (its header through `tamper`)."""
        keys = self.cache.probe(prompt)
        self.probed_turn_ends += sum(item == "turn_end" for item, _ in keys)
        plan = self.cache.prefetch(prompt, in_store=[key for _, key in keys if key in store])
        self.run_transfers(store)  # the puts of what the reservations evicted, before the units are written
        for f in plan.fetches:
            if f.key not in store:
                self.cache.fetched(f.item, f.unit, None)
                continue
            header, payload = store[f.key]
            parts = np.frombuffer(payload, np.uint8).reshape(-1, U)
            if f.item == "turn_end":
                assert len(parts) == len(f.kv_units) + 1
                for part, unit in zip(parts, f.kv_units):
                    if unit != reprise.NO_UNIT:
                        self.host_kv[unit] = part
                self.host_slots[f.unit] = parts[-1]
            else:
                assert f.kv_units == [] and len(parts) == 1
                (self.host_kv if f.item == "block" else self.host_slots)[f.unit] = parts[0]
            self.cache.fetched(f.item, f.unit, tamper(header) if tamper else header)
        return plan

    def prefill(self, seq, toks, store):
        """A prompt's prefill as an engine runs it: admit `toks` (restoring what the plan says, computing the
        rest), write the captures, commit and complete the step. Returns the plan, the block table, the hash
        of the state restored (0 for none), where the computation started and the KV blocks under
        usable_tokens as the GPU pool held them when the prefill started."""
        c = self.cache
        plan = c.admit(seq, toks)
        self.run_transfers(store)
        table = list(plan.block_table)
        restored = None
        if plan.restore_slot >= 0:
            restored = (self.host_slots if plan.restore_from_host else self.gpu_slots)[plan.restore_slot]
        base, start = (hash_of(restored) if restored is not None else 0), plan.usable_tokens
        if plan.copy_src >= 0:
            self.gpu_kv[plan.copy_dst] = self.gpu_kv[plan.copy_src]
        restored_kv = [self.gpu_kv[table[i]].copy() for i in range(-(-plan.usable_tokens // B))]
        n = len(toks)
        for i in range(plan.shared_blocks, len(table)):
            self.gpu_kv[table[i]] = computed(base, toks, start, min((i + 1) * B, n), "P")
        for position, slot in plan.captures:
            self.gpu_slots[slot] = computed(base, toks, start, int(position), "S")
        c.commit(seq, n, plan.captures)
        c.step_complete(c.current_epoch())
        self.run_transfers(store)
        return plan, table, base, start, restored_kv

    def turn(self, seq, toks, reply, store):
        """One turn as an engine runs it: the prompt's prefill (`prefill`), then decode `reply` one token a step
        (all but its last token fed), finish with the turn-end capture and complete the step. `toks` becomes
        prompt + reply."""
        c = self.cache
        plan, table, base, start, restored_kv = self.prefill(seq, toks, store)
        at = len(toks)
        for t in reply[:-1]:  # each decode step writes its token's KV into the block it falls in
            toks.append(t)
            table += list(c.extend(seq, [t]).new_blocks)
            at += 1
            self.gpu_kv[table[(at - 1) // B]] = computed(base, toks, start, at, "D")
            c.commit(seq, at)
            c.step_complete(c.current_epoch())
            self.run_transfers(store)
        toks.append(reply[-1])
        end = c.finish(seq)
        turn_end = None
        if end.capture_slot >= 0:
            assert end.capture_position == at
            self.gpu_slots[end.capture_slot] = computed(base, toks, start, at, "E")
            turn_end = self.gpu_slots[end.capture_slot].copy()
        kv = [self.gpu_kv[table[i]].copy() for i in range(-(-at // B))]
        c.step_complete(c.current_epoch())
        self.run_transfers(store)  # the turn end's put, now that its step completed
        return Turn(plan, restored_kv, kv, turn_end)


def first_turn(writer, store):
    """Turn 1 on `writer`: 200 prompt tokens, a 37-token reply; its turn end sits at 236 (blocks 0 .. 11
    prefill-exact, 12 and 13 decode-filled, a partial block of 12 tokens). Returns (tokens, Turn)."""
    toks = tokens(200, 1)
    return toks, writer.turn(1, toks, tokens(37, 70000), store)


def test_a_turn_end_one_engine_wrote_is_continued_by_another_bitwise():
    store, alive_store = {}, {}
    writer, reader, alive = Process(writer_id=11), Process(writer_id=12), Process()
    toks, t1 = first_turn(writer, store)
    assert t1.turn_end is not None and len(t1.kv) == 15
    [put] = writer.turn_end_puts
    assert put.item == "turn_end" and put.device and len(put.key) == 32
    assert len(put.kv_units) == 1 and reprise.NO_UNIT not in put.kv_units  # the partial block 14
    assert repr(put) == f"RemotePut(item='turn_end', unit={put.unit}, device=True, kv_units=[{put.kv_units[0]}])"
    m = writer.cache.metrics()
    assert m["remote_turn_ends_put"] == 1 and m["remote_turn_ends_lost"] == 0
    config = hybrid_config()
    assert len(store[put.key][1]) == 2 * U  # the partial KV block and the snapshot; blocks 12 and 13 are links
    # The session kept alive: the same turn on its own engine.
    alive_toks, a1 = first_turn(alive, alive_store)
    assert same(a1.kv, t1.kv) and (a1.turn_end == t1.turn_end).all()

    # Turn 2 on an engine that never saw the conversation: 20 new tokens, a 9-token reply.
    user, reply = tokens(20, 90000), tokens(9, 95000)
    following = toks + user
    plan = reader.prefetch(following, store)
    assert reader.probed_turn_ends > 0
    assert plan.blocks == 12  # the prefill-exact chain; then the turn end with its links
    [turn_end] = [f for f in plan.fetches if f.item == "turn_end"]
    assert len(turn_end.kv_units) == 1 and repr(turn_end).startswith("RemoteFetch(item='turn_end', unit=")
    assert all(f.kv_units == [] for f in plan.fetches if f.item != "turn_end")
    assert sum(f.item == "block" for f in plan.fetches) == 12 + 2  # the chain and the links to blocks 12, 13
    m = reader.cache.metrics()
    assert m["remote_turn_end_hits"] == 1 and m["remote_rejected"] == 0
    assert m["remote_bytes_fetched"] == 12 * config.bytes_per_kv_block + (
        3 * config.bytes_per_kv_block + config.bytes_per_snapshot)
    reader.cache.check_invariants()
    r2 = reader.turn(2, following, reply, store)
    assert r2.plan.usable_tokens == 236 and r2.plan.kv_matched_tokens == 236
    assert r2.plan.restore_from_host and r2.plan.restore_exactness == "decode_continuation"
    assert same(r2.restored, t1.kv)  # the writer's blocks, bitwise, the partial one included
    # Every KV block of the conversation and the next turn end, as the session kept alive has them.
    a2 = alive.turn(2, alive_toks + user, reply, alive_store)
    assert a2.plan.usable_tokens == 236 and same(a2.restored, t1.kv)
    assert same(r2.kv, a2.kv) and (r2.turn_end == a2.turn_end).all()
    reader.cache.check_invariants()
    writer.cache.check_invariants()


def test_a_turn_end_at_a_block_boundary_travels_with_a_no_unit_part():
    store = {}
    writer, reader = Process(), Process()
    toks = tokens(200, 1)
    writer.turn(1, toks, tokens(25, 70000), store)  # the turn end at 224 = 14 B
    [put] = writer.turn_end_puts
    assert put.kv_units[-1] == reprise.NO_UNIT and "NO_UNIT]" in repr(put)
    following = toks + tokens(7, 90000)
    reader.prefetch(following, store)
    assert reader.cache.metrics()["remote_turn_end_hits"] == 1
    admitted = reader.cache.admit(2, following)
    assert admitted.usable_tokens == 224 and admitted.copy_src == -1
    assert admitted.restore_exactness == "decode_continuation"
    reader.cache.check_invariants()


@pytest.mark.parametrize("user_tokens, probed", [(1, 1), (3, 1), (19, 2)])
def test_a_short_follow_up_finds_the_turn_end_at_the_block_boundary_its_own_match_reaches(user_tokens, probed):
    """The writer's turn end at 204 (boundary 192 = 12 B); the reader computed the 200-token prompt itself, so
    a follow-up of 1 or 3 tokens has its last full block at 12, where the reader's own match ends: the turn end
    is keyed by the chain of the blocks it holds, with none chained past them. With 19 tokens there is one
    more boundary (208) to list."""
    store, alive_store = {}, {}
    writer, reader, alive = Process(writer_id=21), Process(writer_id=22), Process()
    prompt = tokens(200, 1)
    toks, alive_toks = list(prompt), list(prompt)
    writer.turn(1, toks, tokens(5, 70000), store)  # 4 tokens fed: the turn end at 204
    alive.turn(1, alive_toks, tokens(5, 70000), alive_store)
    assert writer.cache.metrics()["remote_turn_ends_put"] == 1
    reader.prefill(1, list(prompt), store)
    reader.cache.release(1)

    user, reply = tokens(user_tokens, 90000), tokens(6, 95000)
    following = toks + user
    keys = reader.cache.probe(following)
    assert sum(item == "turn_end" for item, _ in keys) == probed
    plan = reader.prefetch(following, store)
    assert plan.blocks == 0  # the reader holds the chain under the turn end
    [turn_end] = [f for f in plan.fetches if f.item == "turn_end"]
    assert len(turn_end.kv_units) == 1  # the partial block alone
    m = reader.cache.metrics()
    assert m["remote_turn_end_hits"] == 1 and m["remote_rejected"] == 0
    reader.cache.check_invariants()
    r2 = reader.turn(2, following, reply, store)
    assert r2.plan.usable_tokens == 204 and r2.plan.restore_from_host
    assert r2.plan.restore_exactness == "decode_continuation"
    a2 = alive.turn(2, alive_toks + user, reply, alive_store)
    assert a2.plan.usable_tokens == 204 and same(r2.restored, a2.restored)
    assert same(r2.kv, a2.kv) and (r2.turn_end == a2.turn_end).all()
    reader.cache.check_invariants()


def test_a_conversation_continues_across_three_engines():
    """Each turn from the last writer's turn end; engine a, back at turn 4, holds its own turn-1 blocks and
    fetches only the links it lacks."""
    store, alive_store = {}, {}
    a, b, c, alive = Process(writer_id=1), Process(writer_id=2), Process(writer_id=3), Process()
    toks, alive_toks = tokens(150, 1), tokens(150, 1)
    fetched = []
    for turn, engine in enumerate((a, b, c, a)):
        reply = tokens(11 + 7 * turn, 70000 + 1000 * turn)
        if turn:
            user = tokens(13 + turn, 90000 + 1000 * turn)
            toks += user
            alive_toks += user
            plan = engine.prefetch(toks, store)
            [fetch] = [f for f in plan.fetches if f.item == "turn_end"]
            fetched.append((plan.blocks, sum(f.item == "block" for f in plan.fetches)))
        before = len(toks)
        t = engine.turn(turn + 1, toks, reply, store)
        k = alive.turn(turn + 1, alive_toks, reply, alive_store)
        assert t.plan.usable_tokens == k.plan.usable_tokens
        if turn:
            assert t.plan.usable_tokens + 14 + turn == before
        assert same(t.kv, k.kv) and (t.turn_end == k.turn_end).all()
    # (prefill-exact chain blocks, all block fetches): b and c fetch the chain's 9 and the links from block 9 (the
    # first decode-filled one) to the last turn end, 1 and 3; a holds the chain and its own block 9 and fetches
    # the links to blocks 10-13 only.
    assert fetched == [(9, 9 + 1), (9, 9 + 3), (0, 4)]
    for engine in (a, b, c):
        engine.cache.check_invariants()


def test_without_turn_ends_in_the_store_the_reader_recomputes_and_its_bytes_differ():
    store, alive_store = {}, {}
    writer, reader, alive = Process(turn_ends=False), Process(turn_ends=False), Process(turn_ends=False)
    toks, _ = first_turn(writer, store)
    alive_toks, _ = first_turn(alive, alive_store)
    assert writer.turn_end_puts == [] and writer.cache.metrics()["remote_turn_ends_put"] == 0
    user, reply = tokens(20, 90000), tokens(9, 95000)
    reader.prefetch(toks + user, store)
    assert reader.probed_turn_ends == 0
    r2 = reader.turn(2, toks + user, reply, store)
    assert r2.plan.usable_tokens == 0  # chat captures no prefill-exact snapshot without a branch
    a2 = alive.turn(2, alive_toks + user, reply, alive_store)
    assert a2.plan.usable_tokens == 236
    assert not (r2.turn_end == a2.turn_end).all()  # a recomputation is not the session kept alive


def flip_first_token(header):
    """A turn end's header with its first token changed (byte 84: past the fixed part)."""
    assert header[8] == 2  # item: turn end
    return header[:84] + bytes([header[84] ^ 1]) + header[85:]


def test_a_tampered_turn_end_is_rejected_and_nothing_restores_from_it():
    store = {}
    toks, _ = first_turn(Process(), store)
    following = toks + tokens(20, 90000)
    reader = Process()
    plan = reader.prefetch(following, store, tamper=lambda h: flip_first_token(h) if h[8] == 2 else h)
    assert [f.item for f in plan.fetches].count("turn_end") == 1
    m = reader.cache.metrics()
    assert m["remote_turn_end_hits"] == 0 and m["remote_rejected"] == 1
    reader.cache.check_invariants()
    admitted = reader.cache.admit(2, following)
    assert admitted.usable_tokens == 0 and admitted.restore_exactness == "prefill_exact"
    reader.cache.check_invariants()


def test_fetched_turn_end_without_a_pending_fetch_raises_and_changes_nothing():
    store = {}
    reader = Process()
    before = reader.cache.metrics()
    for unit in (0, 1 << 20):
        with pytest.raises(reprise.InvalidArgument):
            reader.cache.fetched("turn_end", unit, None)
    assert reader.cache.metrics() == before
    # A turn end pending into a unit is not a snapshot fetch, nor is it pending twice.
    toks, _ = first_turn(Process(), store)
    keys = reader.cache.probe(toks + tokens(20, 90000))
    plan = reader.cache.prefetch(toks + tokens(20, 90000), in_store=[k for _, k in keys if k in store])
    [turn_end] = [f for f in plan.fetches if f.item == "turn_end"]
    for f in plan.fetches:  # the chain's blocks and the turn end's links arrive
        if f.item == "block":
            reader.cache.fetched(f.item, f.unit, store[f.key][0])
    before = reader.cache.metrics()
    with pytest.raises(reprise.InvalidArgument):
        reader.cache.fetched("snapshot", turn_end.unit, store[turn_end.key][0])
    assert reader.cache.metrics() == before
    reader.cache.fetched("turn_end", turn_end.unit, None)  # a miss: the turn end and its links, counted once
    after = reader.cache.metrics()
    assert after["remote_misses"] == before["remote_misses"] + 1 and after["remote_turn_end_hits"] == 0
    with pytest.raises(reprise.InvalidArgument):
        reader.cache.fetched("turn_end", turn_end.unit, store[turn_end.key][0])
    assert reader.cache.metrics() == after
    reader.cache.check_invariants()
    with pytest.raises(ValueError, match="turn_end"):
        reader.cache.fetched("turn-end", 0, None)


def test_remote_turn_ends_options_are_checked():
    config = hybrid_config()
    base = dict(kv_blocks=32, snapshot_budget_bytes=2 * config.bytes_per_snapshot)
    host = dict(base, host_kv_budget_bytes=8 * config.bytes_per_kv_block)
    remote = dict(host, remote_fleet_seed=7)
    # The policies that capture turn ends and accept decode continuations take it; the others are refused.
    for policy in reprise.policy_names():
        if policy in ("block_sharing", "memory_only"):
            continue
        kw = dict(remote, capture_interval=128)
        if policy in ("snapshot_turns", "snapshot_all", "chat"):
            assert reprise.PrefixCache(config, policy, remote_turn_ends=True, **kw).remote_tier
        else:
            with pytest.raises(reprise.UnsupportedConfig, match="remote_turn_ends_without_turn_ends"):
                reprise.PrefixCache(config, policy, remote_turn_ends=True, **kw)
    # Without the remote tier: with a host tier, or with none.
    for kw in (host, base):
        with pytest.raises(reprise.UnsupportedConfig, match="remote_options_without_remote_tier"):
            reprise.PrefixCache(config, "chat", remote_turn_ends=True, **kw)
    # A writer id is an unsigned 64-bit number.
    reprise.PrefixCache(config, "chat", remote_turn_ends=True, remote_writer_id=2**64 - 1, **remote)
    with pytest.raises(TypeError):
        reprise.PrefixCache(config, "chat", remote_turn_ends=True, remote_writer_id=-1, **remote)
    assert reprise.NO_UNIT == 2**32 - 1

