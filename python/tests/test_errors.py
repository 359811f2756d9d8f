# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Every reprise::errc is an exception class deriving from reprise.Error; a call that raises leaves the cache
exactly as it was (metrics compared before and after, invariants rechecked)."""

import numpy as np
import pytest

import reprise
from conftest import attention_config, hybrid_config

ERRCS = {
    "invalid_argument": ("InvalidArgument", 1),
    "size_mismatch": ("SizeMismatch", 2),
    "misaligned": ("Misaligned", 3),
    "unsupported_config": ("UnsupportedConfig", 4),
    "pool_exhausted": ("PoolExhausted", 5),
    "budget_too_small": ("BudgetTooSmall", 6),
    "unknown_sequence": ("UnknownSequence", 7),
    "duplicate_sequence": ("DuplicateSequence", 8),
    "double_release": ("DoubleRelease", 9),
    "out_of_range": ("OutOfRange", 10),
    "overlapping_pairs": ("OverlappingPairs", 11),
    "device_error": ("DeviceError", 12),
    "no_device": ("NoDevice", 13),
    "invariant_violated": ("InvariantViolated", 14),
    "unwritten_blocks": ("UnwrittenBlocks", 15),
}


def test_every_errc_has_a_class():
    assert set(reprise.ERRORS) == set(ERRCS)
    for errc, (name, code) in ERRCS.items():
        cls = getattr(reprise, name)
        assert reprise.ERRORS[errc] is cls
        assert issubclass(cls, reprise.Error) and issubclass(reprise.Error, Exception)
        assert cls.errc == errc and cls.code == code and cls.__name__ == name
        assert cls.__doc__ and errc in cls.__doc__


def busy_cache(**kw):
    """A snapshot_turns cache with history: a published prompt with a snapshot, one live sequence."""
    config = hybrid_config()
    cache = reprise.PrefixCache(config, "snapshot_turns", kv_blocks=kw.pop("kv_blocks", 32),
                                max_sequences=kw.pop("max_sequences", 4),
                                snapshot_budget_bytes=2 * config.bytes_per_snapshot, hasher_seed=3)
    plan = cache.admit(1, np.arange(200, dtype=np.int32))
    cache.commit(1, 200, plan.captures[:, 0])
    cache.release(1)
    cache.step_complete(cache.current_epoch())
    plan = cache.admit(2, np.arange(150, dtype=np.int32))
    cache.commit(2, 100)
    return cache


CACHE_ERRORS = [
    ("empty prompt", reprise.InvalidArgument, lambda c: c.admit(9, [])),
    ("media digest over 32 bytes", reprise.InvalidArgument,
     lambda c: c.admit(9, [1, 2, 3], reprise.ExtraKeys(media=[(1, bytes(33))]))),
    ("media items out of order", reprise.InvalidArgument,
     lambda c: c.admit(9, np.arange(200, dtype=np.int32), reprise.ExtraKeys(media=[(90, b"a"), (80, b"b")]))),
    ("media items at one position", reprise.InvalidArgument,
     lambda c: c.admit(9, np.arange(200, dtype=np.int32), reprise.ExtraKeys(media=[(80, b"a"), (80, b"b")]))),
    ("a media item past the prompt", reprise.OutOfRange,
     lambda c: c.admit(9, np.arange(200, dtype=np.int32), reprise.ExtraKeys(media=[(80, b"a"), (200, b"b")]))),
    ("commit going back", reprise.InvalidArgument, lambda c: c.commit(2, 50)),
    ("commit of an unplanned capture", reprise.InvalidArgument, lambda c: c.commit(2, 128, [64])),
    ("fork with uncommitted tokens", reprise.InvalidArgument, lambda c: c.fork(2, 9)),
    ("no blocks left", reprise.PoolExhausted, lambda c: c.admit(9, np.arange(1000, 1600, dtype=np.int32))),
    ("extend past the pool", reprise.PoolExhausted, lambda c: c.extend(2, np.zeros(600, np.int32))),
    ("commit of an unknown sequence", reprise.UnknownSequence, lambda c: c.commit(77, 1)),
    ("extend of an unknown sequence", reprise.UnknownSequence, lambda c: c.extend(77, [1])),
    ("finish of an unknown sequence", reprise.UnknownSequence, lambda c: c.finish(77)),
    ("fork of an unknown sequence", reprise.UnknownSequence, lambda c: c.fork(77, 78)),
    ("admit of a live id", reprise.DuplicateSequence, lambda c: c.admit(2, [1, 2, 3])),
    ("release twice", reprise.DoubleRelease, lambda c: c.release(1)),
    ("commit beyond the tokens", reprise.OutOfRange, lambda c: c.commit(2, 151)),
    ("step beyond the last", reprise.OutOfRange, lambda c: c.step_complete(2**64 - 2)),
]


@pytest.mark.parametrize("what,error,call", CACHE_ERRORS, ids=[c[0] for c in CACHE_ERRORS])
def test_cache_errors_change_nothing(what, error, call):
    cache = busy_cache()
    before, epoch, table = cache.metrics(), cache.current_epoch(), cache.block_table(2).copy()
    with pytest.raises(error) as info:
        call(cache)
    assert isinstance(info.value, reprise.Error)
    assert info.value.errc in str(info.value)
    assert cache.metrics() == before and cache.current_epoch() == epoch
    np.testing.assert_array_equal(cache.block_table(2), table)
    cache.check_invariants()
    # The cache still works after the error.
    plan = cache.admit(50, np.arange(200, dtype=np.int32))
    assert plan.usable_tokens == 192  # the last aligned snapshot of the first prompt


def test_unwritten_blocks_change_nothing():
    """share_in_step: a sharer commits only once its writer's first commit wrote what it shares."""
    cache = reprise.PrefixCache(attention_config(), "block_sharing", kv_blocks=32, hasher_seed=3, share_in_step=True)
    cache.admit(1, np.arange(70, dtype=np.int32))
    assert cache.admit(2, np.arange(70, dtype=np.int32)).shared_blocks == 4
    before, table = cache.metrics(), cache.block_table(2).copy()
    with pytest.raises(reprise.UnwrittenBlocks) as info:
        cache.commit(2, 70)  # the writer has not committed
    assert info.value.errc == "unwritten_blocks" and cache.metrics() == before
    np.testing.assert_array_equal(cache.block_table(2), table)
    cache.check_invariants()
    cache.commit(1, 70)
    cache.commit(2, 70)
    cache.check_invariants()


def test_max_sequences_exhausted():
    cache = busy_cache(max_sequences=1)
    before = cache.metrics()
    with pytest.raises(reprise.PoolExhausted):
        cache.admit(9, [1, 2, 3])
    assert cache.metrics() == before


CREATE_ERRORS = [
    (reprise.InvalidArgument, lambda: reprise.PrefixCache(hybrid_config(), "memory_only", kv_blocks=0)),
    (reprise.OutOfRange, lambda: reprise.PrefixCache(hybrid_config(), "memory_only", kv_blocks=2**31)),
    (reprise.UnsupportedConfig, lambda: reprise.PrefixCache(hybrid_config(), "block_sharing", kv_blocks=8)),
    (reprise.UnsupportedConfig, lambda: reprise.PrefixCache(attention_config(), "snapshot_turns", kv_blocks=8,
                                                            snapshot_budget_bytes=1 << 20)),
    (reprise.UnsupportedConfig, lambda: reprise.PrefixCache(hybrid_config(), "memory_only", kv_blocks=8,
                                                            share_in_step=True)),
    (reprise.BudgetTooSmall, lambda: reprise.PrefixCache(hybrid_config(), "snapshot_turns", kv_blocks=8,
                                                         snapshot_budget_bytes=100)),
    (reprise.Misaligned, lambda: reprise.PrefixCache(hybrid_config(), "snapshot_interval", kv_blocks=8,
                                                     snapshot_budget_bytes=1 << 20, capture_interval=96)),
    (reprise.Misaligned, lambda: reprise.ModelConfig([
        (reprise.KvShape(kv_heads=1, head_dim=8, block_size=48), 1),
        (reprise.Mamba2Shape(heads=1, head_dim=8, state_dim=8, chunk=64), 1)])),
    (reprise.UnsupportedConfig, lambda: reprise.ModelConfig([
        (reprise.Mamba2Shape(heads=1, head_dim=8, state_dim=8, conv_width=5), 1)])),
]


@pytest.mark.parametrize("error,call", CREATE_ERRORS)
def test_create_errors(error, call):
    with pytest.raises(error):
        call()


def test_unknown_policy_names_the_policies():
    with pytest.raises(ValueError, match="snapshot_prefill_exact"):
        reprise.PrefixCache(hybrid_config(), "lru", kv_blocks=8)


@pytest.mark.skipif(not reprise.HAS_OPS, reason="built without reprise::state_ops")
def test_kernel_errors_write_nothing():
    ops = reprise.ops
    pool = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    kept = pool.copy()
    with pytest.raises(reprise.OverlappingPairs):
        ops.copy_units([pool], np.array([[0, 1], [2, 1]], np.int32))
    with pytest.raises(reprise.OutOfRange):
        ops.copy_units([pool], np.array([[0, 4]], np.int32))
    x = np.ones((8, 3), np.float32)
    out = np.zeros((8, 3), np.float32)
    conv = np.zeros((2, 3, 3), np.float32)
    with pytest.raises(reprise.SizeMismatch):
        ops.causal_conv1d_prefill(x, np.ones((4, 4), np.float32), None, conv, out, [0, 8], [0], [-1], [0])
    with pytest.raises(reprise.UnsupportedConfig):
        ops.causal_conv1d_prefill(x, np.ones((3, 5), np.float32), None, np.zeros((2, 4, 3), np.float32), out,
                                  [0, 8], [0], [-1], [0])
    H, P, N = 1, 2, 2
    args = (np.ones((8, H, P), np.float32), np.ones((8, H), np.float32), -np.ones(H, np.float32),
            np.ones((8, 1, N), np.float32), np.ones((8, 1, N), np.float32))
    states = np.zeros((2, H, P, N), np.float32)
    y = np.zeros((8, H, P), np.float32)
    with pytest.raises(reprise.Misaligned):  # a capture off the chunk grid
        ops.mamba2_ssd_prefill(*args, states, y, [0, 8], [60], [-1], [0], np.array([[0, 66, 1]]), chunk=64)
    np.testing.assert_array_equal(pool, kept)
    assert not out.any() and not states.any() and not y.any()


def test_errors_no_host_call_reaches_are_still_classes():
    # DeviceError and NoDevice come from the CUDA launchers, InvariantViolated from a bookkeeping bug: no host
    # call of this package can raise them; their classes exist for engines that catch reprise.Error broadly.
    for cls in (reprise.DeviceError, reprise.NoDevice, reprise.InvariantViolated):
        assert issubclass(cls, reprise.Error) and not issubclass(cls, ValueError)
