# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The remote tier from Python: two caches stand for two engine processes sharing a store (a dict here). A
prefix one computed is found by the other's probe, fetched into its host units, verified and restored; a value
whose header differs is never used. Any store that keeps bytes under a key will do: the cache checks every
header it is given against what the prompt implies."""

import numpy as np
import pytest

import reprise
from conftest import attention_config, hybrid_config

B, A = 16, 64


def tokens(n, start=0):
    return np.arange(start, start + n, dtype=np.int32)


def make(config=None, policy="strict", seed=7, revision="weights-1", **kw):
    config = config or hybrid_config()
    if policy != "block_sharing":
        kw.setdefault("snapshot_budget_bytes", 2 * config.bytes_per_snapshot)
        kw.setdefault("host_snapshot_budget_bytes", 4 * config.bytes_per_snapshot)
    kw.setdefault("host_kv_budget_bytes", 32 * config.bytes_per_kv_block)
    return reprise.PrefixCache(config, policy, kv_blocks=32, remote_fleet_seed=seed, remote_revision=revision,
                               **kw)


def serve(cache, seq, prompt, store):
    """Admits, commits the whole prompt (its captures written), releases, completes the step and runs the next
    step's transfers, putting every remote put in `store`. Returns the admit plan."""
    plan = cache.admit(seq, prompt)
    put(cache, store)
    cache.commit(seq, len(prompt), plan.captures[:, 0] if len(plan.captures) else None)
    cache.release(seq)
    cache.step_complete(cache.current_epoch())
    put(cache, store)
    return plan


def put(cache, store):
    for p in cache.take_transfers().remote_puts:
        assert len(p.key) == 32 and p.item in ("block", "snapshot")
        store[p.key] = p.header  # an engine stores the unit's bytes with it


def fetch(cache, prompt, store, probe=True, corrupt=False):
    """Probes (or not), prefetches and answers every fetch from `store`. Returns the FetchPlan."""
    in_store = [key for item, key in cache.probe(prompt) if key in store] if probe else None
    plan = cache.prefetch(prompt, in_store=in_store)
    put(cache, store)
    for f in plan.fetches:
        header = store.get(f.key)
        if header is not None and corrupt:
            header = header[:-1] + bytes([header[-1] ^ 1])
        cache.fetched(f.item, f.unit, header)
    return plan


def test_a_prefix_one_process_computed_is_restored_by_another():
    store = {}
    writer = make(remote_write_through=True)
    assert writer.remote_tier
    prompt = tokens(2 * A + 9)  # 8 full blocks, a prefill-exact snapshot at 2A
    serve(writer, 1, prompt, store)
    assert len(store) == 9  # written through once the step completed
    assert writer.metrics()["remote_puts"] == 9

    reader = make()
    following = np.concatenate([prompt, tokens(3 * A, 5000)])
    keys = reader.probe(following)
    assert [item for item, _ in keys].count("block") == 20 and len(keys) == 25
    assert reader.metrics()["remote_fetches"] == 0  # a probe reserves nothing
    plan = fetch(reader, following, store)
    assert plan.blocks == 8 and len(plan.fetches) == 9
    assert reader.metrics()["remote_hits"] == 9 and reader.metrics()["remote_misses"] == 0
    admitted = reader.admit(1, following)
    assert admitted.restore_from_host and admitted.usable_tokens == 2 * A and admitted.shared_blocks == 8
    assert admitted.restore_exactness == "prefill_exact"
    reader.check_invariants()

    # Without a probe every candidate is fetched: 20 blocks and the two deepest snapshots, which miss.
    optimist = make()
    plan = fetch(optimist, following, store, probe=False)
    assert plan.blocks == 20 and len(plan.fetches) == 22
    assert optimist.metrics()["remote_misses"] == 14


def test_a_value_whose_header_differs_is_never_used():
    store = {}
    serve(make(remote_write_through=True), 1, tokens(2 * A + 9), store)
    reader = make()
    fetch(reader, tokens(2 * A + 9), store, corrupt=True)
    assert reader.metrics()["remote_rejected"] == 9 and reader.metrics()["remote_hits"] == 0
    assert reader.admit(1, tokens(2 * A + 9)).usable_tokens == 0
    # Another fleet seed, or other weights, name everything differently.
    for other in (make(seed=8), make(revision="weights-2")):
        assert not any(key in store for _, key in other.probe(tokens(2 * A + 9)))


def test_write_back_puts_what_the_host_tier_evicts():
    store = {}
    writer = make(host_kv_budget_bytes=6 * hybrid_config().bytes_per_kv_block)
    serve(writer, 1, tokens(2 * A + 9), store)
    assert not store  # still held in GPU memory
    for s in range(2, 8):
        serve(writer, s, tokens(6 * B + 1, 10000 * s), store)
    puts = writer.metrics()["remote_puts"]
    assert puts > 0 and len(store) == puts
    assert all(len(key) == 32 for key in store)


def test_remote_tier_options_are_checked():
    with pytest.raises(reprise.UnsupportedConfig, match="host tier"):
        reprise.PrefixCache(hybrid_config(), "strict", kv_blocks=8,
                            snapshot_budget_bytes=hybrid_config().bytes_per_snapshot, remote_fleet_seed=1)
    with pytest.raises(reprise.UnsupportedConfig):
        make(policy="memory_only")
    with pytest.raises(reprise.UnsupportedConfig):  # write-through is the remote tier's
        reprise.PrefixCache(hybrid_config(), "strict", kv_blocks=8,
                            snapshot_budget_bytes=hybrid_config().bytes_per_snapshot,
                            host_kv_budget_bytes=hybrid_config().bytes_per_kv_block, remote_write_through=True)
    cache = make()
    before = cache.metrics()
    with pytest.raises(ValueError, match="32 bytes"):
        cache.prefetch(tokens(A + 1), in_store=[b"short"])
    # Keys of another type are a TypeError (they once raised RuntimeError: std::bad_cast).
    for bad in (["k" * 32], [None], [bytearray(32)], [32], 7):
        with pytest.raises(TypeError):
            cache.prefetch(tokens(A + 1), in_store=bad)
    with pytest.raises(ValueError, match="block, snapshot or turn_end"):
        cache.fetched("page", 0, None)
    with pytest.raises(reprise.InvalidArgument):  # no fetch pending into that unit
        cache.fetched("block", 0, None)
    with pytest.raises(reprise.InvalidArgument):
        cache.probe([])
    assert cache.metrics() == before  # a call that raises changed nothing
    cache.check_invariants()
    plain = reprise.PrefixCache(attention_config(), "block_sharing", kv_blocks=8)
    assert not plain.remote_tier and plain.probe(tokens(4 * B)) == []
    assert make(attention_config(), "block_sharing").remote_tier
