# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The Python engine loop of examples/chat.py: multi-turn chat with caching on is bitwise caching off."""

import pathlib
import sys

import numpy as np
import pytest

import reprise

pytestmark = pytest.mark.skipif(not reprise.HAS_OPS, reason="built without reprise::state_ops")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

if reprise.HAS_OPS:
    import chat
    import tiny_hybrid


@pytest.fixture(scope="module")
def baseline():
    return chat.serve(chat.Uncached(512), 512)


@pytest.mark.parametrize("policy", ["strict", "memory_only"])
def test_caching_on_is_bitwise_caching_off(baseline, policy):
    config = tiny_hybrid.model_config()
    cache = reprise.PrefixCache(config, policy, kv_blocks=512, snapshot_budget_bytes=16 * config.bytes_per_snapshot)
    outputs, engine = chat.serve(cache, 512)
    assert chat.same(outputs, baseline[0])
    cache.check_invariants()
    if policy == "strict":
        assert engine.skipped_tokens > 1000  # the system prompt and earlier turns were restored, not recomputed
        assert cache.metrics()["snapshot_hits"] >= 6
    else:
        assert engine.skipped_tokens == 0 and cache.metrics()["blocks_shared"] > 0


@pytest.mark.parametrize("pool", ["m_ssm", "m_conv", "g_state", "g_conv"])
def test_a_corrupted_snapshot_is_noticed(baseline, monkeypatch, pool):
    # Proves the comparison can fail: perturb one state component of every restored snapshot.
    copy = tiny_hybrid.Memory.copy_slots

    def corrupting(self, pairs):
        copy(self, pairs)
        for src, dst in pairs:
            if dst == self.m_ssm.shape[0] - 1 and src != dst:  # a restore into the live slot
                getattr(self, pool)[dst] += np.float32(1e-3)

    monkeypatch.setattr(tiny_hybrid.Memory, "copy_slots", corrupting)
    config = tiny_hybrid.model_config()
    cache = reprise.PrefixCache(config, "strict", kv_blocks=512,
                                snapshot_budget_bytes=16 * config.bytes_per_snapshot)
    outputs, _ = chat.serve(cache, 512)
    assert not chat.same(outputs, baseline[0])


def test_example_main_exits_zero(capsys):
    assert chat.main() == 0
    assert "True" in capsys.readouterr().out
