# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The host tier: what the GPU pools evict is offloaded into host units and onboarded on a later hit; the cache
plans every move (take_transfers) and the engine moves the bytes. End to end, the example engine served
through GPU pools far too small for its workload decodes bitwise what it decodes with GPU memory to spare."""

import pathlib
import sys

import numpy as np
import pytest

import reprise
from conftest import attention_config, hybrid_config

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
if reprise.HAS_OPS:
    import chat
    import tiny_hybrid

needs_ops = pytest.mark.skipif(not reprise.HAS_OPS, reason="built without reprise::state_ops")
B = 16


def tokens(n, start=0):
    return np.arange(start, start + n, dtype=np.int32)


def pairs(moves):
    return [tuple(m) for m in moves.tolist()]


class BlockEngine:
    """Moves what the KV blocks hold the way an engine moves their bytes: a GPU pool and a host pool of blocks,
    each block holding the tokens it was computed for; transfers by numpy fancy indexing, offloads first."""

    def __init__(self, cache):
        self.cache = cache
        self.gpu = np.full((cache.kv_blocks, B), -1, np.int64)
        self.host = np.full((cache.host_kv_units, B), -1, np.int64)
        self.taken = []

    def run_transfers(self):
        t = self.cache.take_transfers()
        self.taken.append(t)
        for src, dst, moves in ((self.gpu, self.host, t.kv_offload), (self.host, self.gpu, t.kv_onboard)):
            dst[moves[:, 1]] = src[moves[:, 0]]
        return t

    def serve(self, seq, prompt):
        """Admits, writes the blocks the prompt computes, commits, releases and completes the step."""
        plan = self.cache.admit(seq, prompt)
        self.run_transfers()
        self.check_shared(plan, prompt)
        for i in range(plan.shared_blocks, len(prompt) // B):
            self.gpu[plan.block_table[i]] = prompt[i * B:(i + 1) * B]
        self.cache.commit(seq, len(prompt))
        self.cache.release(seq)
        self.cache.step_complete(self.cache.current_epoch())
        return plan

    def check_shared(self, plan, prompt):
        for i in range(plan.shared_blocks):
            np.testing.assert_array_equal(self.gpu[plan.block_table[i]], prompt[i * B:(i + 1) * B])


def test_evicted_blocks_go_to_the_host_and_come_back_on_the_next_hit():
    cache = reprise.PrefixCache(attention_config(), "block_sharing", kv_blocks=8, hasher_seed=5,
                                host_kv_budget_bytes=32 * attention_config().bytes_per_kv_block)
    assert cache.host_kv_units == 32 and cache.host_snapshot_units == 0
    engine = BlockEngine(cache)
    first = tokens(4 * B + 1)
    p1 = engine.serve(1, first)
    assert engine.taken[-1].empty
    first_blocks = p1.block_table[:4].tolist()

    # Eight new blocks: the four cached ones are evicted, and offloaded.
    engine.serve(2, tokens(8 * B, 5000))
    offloaded = engine.taken[-1].kv_offload
    assert offloaded.dtype == np.int32 and offloaded.shape == (4, 2) and not offloaded.flags.writeable
    assert sorted(offloaded[:, 0].tolist()) == sorted(first_blocks)
    assert len(engine.taken[-1].kv_onboard) == 0 and len(engine.taken[-1].snapshot_offload) == 0
    m = cache.metrics()
    assert m["host_blocks_offloaded"] == 4 and m["host_blocks_held"] == 4
    assert m["host_bytes_offloaded"] == 4 * attention_config().bytes_per_kv_block
    assert cache.take_transfers().empty  # taken once

    # The first prompt again: the GPU has none of it; the host tier has all four blocks.
    p3 = cache.admit(3, first)
    assert p3.shared_blocks == 4 and p3.kv_matched_tokens == 4 * B and p3.usable_tokens == 4 * B
    assert not p3.restore_from_host  # no snapshot involved
    t3 = engine.run_transfers()
    assert t3.kv_onboard.shape == (4, 2)
    assert t3.kv_onboard[:, 1].tolist() == p3.block_table[:4].tolist()  # into the table's shared blocks
    for (host_unit, _), block in zip(pairs(t3.kv_onboard), first_blocks):
        assert (block, host_unit) in pairs(offloaded)  # from the unit each block was offloaded into
    assert len(t3.kv_offload) == 5  # the blocks taken for it evict the second prompt's
    engine.check_shared(p3, first)  # the shared blocks hold the prompt's own tokens again
    assert offloaded.shape == (4, 2)  # an earlier Transfers keeps its arrays
    m = cache.metrics()
    assert m["host_blocks_onboarded"] == 4 and m["blocks_shared"] == 0
    cache.check_invariants()

    # Admitted in the same step, an equal prompt shares the onboarded blocks in GPU memory.
    p4 = cache.admit(4, first)
    assert p4.shared_blocks == 4 and p4.block_table[:4].tolist() == p3.block_table[:4].tolist()
    assert len(engine.run_transfers().kv_onboard) == 0
    assert cache.metrics()["blocks_shared"] == 4
    cache.commit(3, len(first))
    cache.release(3)
    cache.release(4)
    cache.step_complete(cache.current_epoch())
    cache.check_invariants()


def test_a_turn_end_is_restored_from_the_host():
    config = hybrid_config()
    cache = reprise.PrefixCache(config, "chat", kv_blocks=24, hasher_seed=2,
                                snapshot_budget_bytes=2 * config.bytes_per_snapshot,
                                host_kv_budget_bytes=64 * config.bytes_per_kv_block,
                                host_snapshot_budget_bytes=8 * config.bytes_per_snapshot)
    assert cache.host_snapshot_units == 8 and cache.host_kv_units == 64

    # Turn 1: 200 prompt tokens and a 37-token reply; the turn end sits at 236 (a partial block of 12 tokens).
    history = tokens(200)
    plan = cache.admit(1, history)
    cache.commit(1, 200, plan.captures[:, 0])
    cache.step_complete(cache.current_epoch())
    reply = tokens(37, 70000)
    for n, t in enumerate(reply[:-1], start=201):
        cache.extend(1, [t])
        cache.commit(1, n)
    fin = cache.finish(1)
    assert fin.capture_position == 236 and fin.capture_slot >= 0
    history = np.concatenate([history, reply])
    cache.step_complete(cache.current_epoch())
    cache.take_transfers()

    # Another conversation fills GPU memory: the turn end's blocks, its partial block and its snapshot leave.
    cache.admit(2, tokens(23 * B, 100000))
    evicted = cache.take_transfers()
    assert len(evicted.kv_offload) == 14  # the partial block and full blocks 13 .. 1
    assert len(evicted.snapshot_offload) >= 1 and evicted.snapshot_offload.dtype == np.int32
    assert fin.capture_slot in evicted.snapshot_offload[:, 0].tolist()
    cache.release(2)
    cache.step_complete(cache.current_epoch())
    assert cache.metrics()["snapshots_held"] == 0
    cache.check_invariants()

    # Turn 2 restores the turn end from the host: the state, blocks 1 .. 13 and the partial block come back.
    plan = cache.admit(3, np.concatenate([history, tokens(20, 90000)]))
    assert plan.restore_from_host and 0 <= plan.restore_slot < cache.host_snapshot_units
    assert plan.usable_tokens == 236 and plan.kv_matched_tokens == 236 and plan.shared_blocks == 14
    assert plan.copy_src == -1  # the partial block comes with the transfers
    assert plan.restore_exactness == "decode_continuation"
    back = cache.take_transfers()
    assert len(back.kv_onboard) == 14
    assert back.kv_onboard[-1, 1] == plan.block_table[14]  # the partial block, into the sequence's own
    assert set(back.kv_onboard[:, 1].tolist()) <= set(plan.block_table[:15].tolist())
    m = cache.metrics()
    assert m["host_snapshot_hits"] == 1 and m["host_tails_onboarded"] == 1 and m["host_blocks_onboarded"] == 13
    assert m["host_snapshots_offloaded"] >= 1 and m["host_bytes_onboarded"] > 0
    cache.check_invariants()
    cache.commit(3, len(history) + 20)
    cache.release(3)
    cache.check_invariants()


def test_without_a_host_tier_nothing_moves():
    cache = reprise.PrefixCache(hybrid_config(), "chat", kv_blocks=32,
                                snapshot_budget_bytes=hybrid_config().bytes_per_snapshot)
    assert cache.host_kv_units == 0 and cache.host_snapshot_units == 0
    plan = cache.admit(1, tokens(300))
    assert not plan.restore_from_host
    t = cache.take_transfers()
    assert t.empty and t.kv_offload.shape == (0, 2) and t.kv_onboard.dtype == np.int32
    assert "Transfers(kv_offload=0" in repr(t)
    host = {k: v for k, v in cache.metrics().items() if k.startswith("host_")}
    assert len(host) == 11 and not any(host.values())


@pytest.mark.parametrize("policy", ["chat", "strict", "block_sharing", "snapshot_turns", "snapshot_interval",
                                    "snapshot_prefix_tree", "snapshot_all"])
def test_every_policy_but_memory_only_has_a_host_tier(policy):
    config = attention_config() if policy == "block_sharing" else hybrid_config()
    kw = {} if policy == "block_sharing" else {"snapshot_budget_bytes": 2 * config.bytes_per_snapshot,
                                               "host_snapshot_budget_bytes": 3 * config.bytes_per_snapshot}
    cache = reprise.PrefixCache(config, policy, kv_blocks=8, capture_interval=128,
                                host_kv_budget_bytes=5 * config.bytes_per_kv_block + 1, **kw)
    assert cache.policy == policy and cache.host_kv_units == 5
    assert cache.host_snapshot_units == (0 if policy == "block_sharing" else 3)


def test_host_tier_options_are_checked():
    hybrid, attention = hybrid_config(), attention_config()
    kv, snap = hybrid.bytes_per_kv_block, hybrid.bytes_per_snapshot

    def make(config, policy, **kw):
        if config is hybrid and policy != "memory_only":
            kw.setdefault("snapshot_budget_bytes", snap)
        return reprise.PrefixCache(config, policy, kv_blocks=8, **kw)

    with pytest.raises(reprise.UnsupportedConfig, match="memory_only.*no host tier"):
        make(hybrid, "memory_only", host_kv_budget_bytes=64 * kv)
    with pytest.raises(reprise.UnsupportedConfig, match="memory_only"):
        make(hybrid, "memory_only", host_snapshot_budget_bytes=snap)
    with pytest.raises(reprise.BudgetTooSmall):  # below one KV block
        make(hybrid, "chat", host_kv_budget_bytes=kv - 1)
    with pytest.raises(reprise.BudgetTooSmall):  # host snapshots need host KV memory too
        make(hybrid, "chat", host_snapshot_budget_bytes=4 * snap)
    with pytest.raises(reprise.BudgetTooSmall):  # below one snapshot
        make(hybrid, "chat", host_kv_budget_bytes=kv, host_snapshot_budget_bytes=snap - 1)
    with pytest.raises(reprise.UnsupportedConfig):  # a policy that restores no snapshot keeps none on the host
        make(attention, "block_sharing", host_kv_budget_bytes=attention.bytes_per_kv_block,
             host_snapshot_budget_bytes=64)
    with pytest.raises(reprise.UnsupportedConfig):
        make(attention, "block_sharing", host_kv_budget_bytes=attention.bytes_per_kv_block, share_in_step=True)
    with pytest.raises(ValueError):  # the argument-like errors are ValueErrors
        make(hybrid, "strict", host_kv_budget_bytes=1)
    make(hybrid, "memory_only")  # without a host tier it is fine
    assert make(hybrid, "chat", host_kv_budget_bytes=kv).host_kv_units == 1


@needs_ops
def test_transfer_units_moves_units_between_pool_sets():
    rng = np.random.default_rng(3)
    gpu = [rng.standard_normal((6, 4, 3)).astype(np.float32), rng.standard_normal((6, 5)).astype(np.float16)]
    host = [np.zeros((3, 4, 3), np.float32), np.zeros((3, 5), np.float16)]
    reprise.ops.transfer_units(gpu, host, np.array([[5, 0], [2, 2]], np.int32))
    for g, h in zip(gpu, host):
        np.testing.assert_array_equal(h[0], g[5])
        np.testing.assert_array_equal(h[2], g[2])
        assert not h[1].any()
    frozen = [p.copy() for p in host]
    for p in frozen:
        p.flags.writeable = False
    reprise.ops.transfer_units(frozen, gpu, np.array([[0, 1]], np.int32))  # read-only sources are fine
    np.testing.assert_array_equal(gpu[0][1], host[0][0])
    before = [p.copy() for p in host]
    errors = [
        (reprise.OutOfRange, lambda: reprise.ops.transfer_units(gpu, host, np.array([[0, 3]], np.int32))),
        (reprise.OverlappingPairs, lambda: reprise.ops.transfer_units(gpu, host, np.array([[0, 1], [2, 1]], np.int32))),
        (reprise.SizeMismatch, lambda: reprise.ops.transfer_units(gpu, host[:1], np.array([[0, 1]], np.int32))),
        (reprise.SizeMismatch, lambda: reprise.ops.transfer_units(gpu[::-1], host, np.array([[0, 1]], np.int32))),
        (TypeError, lambda: reprise.ops.transfer_units(gpu, [host[0][:, ::2], host[1]], np.array([[0, 1]], np.int32))),
        (TypeError, lambda: reprise.ops.transfer_units(gpu, frozen, np.array([[0, 1]], np.int32))),
    ]
    for error, call in errors:
        with pytest.raises(error):
            call()
    for p, q in zip(host, before):
        np.testing.assert_array_equal(p, q)  # nothing was written


@pytest.fixture(scope="module")
def spare():
    """'chat' with GPU memory to spare, per system prompt length: the outputs and the engine."""
    config = tiny_hybrid.model_config() if reprise.HAS_OPS else None
    return {n: chat.serve(chat.chat_cache(config, 512, 16), 512, system_tokens=n) for n in (200, 180)}


# 180: the prompt sharing the system prompt's blocks with another conversation captures at its last shared
# block (176), off the chunk grid: the engine ends a prefill piece there.
@needs_ops
@pytest.mark.parametrize("system_tokens", [200, 180])
def test_chat_through_tiny_gpu_pools_and_the_host_tier_is_bitwise_chat_with_memory_to_spare(spare, system_tokens):
    config, kv_blocks = tiny_hybrid.model_config(), chat.TINY_KV_BLOCKS
    reference, reference_engine = spare[system_tokens]
    cache = chat.chat_cache(config, kv_blocks, 1, host_blocks=512, host_snapshots=16)
    outputs, engine = chat.serve(cache, kv_blocks, system_tokens=system_tokens)
    assert chat.same(outputs, reference)
    assert engine.skipped_tokens == reference_engine.skipped_tokens > 1000  # the same prefill skipped
    cache.check_invariants()
    m = cache.metrics()
    assert m["kv_evictions"] > 0 and m["host_blocks_offloaded"] > 0 and m["host_snapshots_offloaded"] > 0
    assert m["host_blocks_onboarded"] > 0 and m["host_tails_onboarded"] > 0 and m["host_snapshot_hits"] >= 6
    # Without the host tier the same GPU pools lose what they evict.
    _, alone = chat.serve(chat.chat_cache(config, kv_blocks, 1), kv_blocks, system_tokens=system_tokens)
    assert alone.skipped_tokens < engine.skipped_tokens


@needs_ops
def test_prefill_exact_snapshots_through_the_host_tier_are_bitwise_caching_off():
    config, kv_blocks = tiny_hybrid.model_config(), chat.TINY_KV_BLOCKS
    baseline, _ = chat.serve(chat.Uncached(512), 512)
    cache = reprise.PrefixCache(config, "strict", kv_blocks=kv_blocks, hasher_seed=1,
                                snapshot_budget_bytes=2 * config.bytes_per_snapshot,
                                host_kv_budget_bytes=512 * config.bytes_per_kv_block,
                                host_snapshot_budget_bytes=16 * config.bytes_per_snapshot)
    outputs, engine = chat.serve(cache, kv_blocks)
    assert chat.same(outputs, baseline)
    assert engine.skipped_tokens > 1000
    m = cache.metrics()
    assert m["host_snapshot_hits"] > 0 and m["host_blocks_onboarded"] > 0
    cache.check_invariants()


@needs_ops
def test_a_corrupted_host_snapshot_is_noticed(spare, monkeypatch):
    # Proves the comparison can fail: perturb every host snapshot unit just before it is restored.
    restore = chat.Engine.restore_from_host

    def corrupting(self, unit):
        self.host.m_ssm[unit] += np.float32(1e-3)
        restore(self, unit)

    monkeypatch.setattr(chat.Engine, "restore_from_host", corrupting)
    config, kv_blocks = tiny_hybrid.model_config(), chat.TINY_KV_BLOCKS
    cache = chat.chat_cache(config, kv_blocks, 1, host_blocks=512, host_snapshots=16)
    outputs, _ = chat.serve(cache, kv_blocks)
    assert cache.metrics()["host_snapshot_hits"] > 0
    assert not chat.same(outputs, spare[200][0])
