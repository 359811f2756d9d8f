# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Small models shared by the tests (their shapes keep every cache and kernel call cheap)."""

import pytest

import reprise


def hybrid_config(block_size=16):
    """One attention, one Mamba2 and one gated-delta layer; alignment 64."""
    return reprise.ModelConfig([
        (reprise.KvShape(kv_heads=2, head_dim=16, block_size=block_size), 1),
        (reprise.Mamba2Shape(heads=4, head_dim=8, state_dim=16, chunk=64), 1),
        (reprise.GatedDeltaShape(key_heads=2, value_heads=2, key_dim=16, value_dim=16, chunk=64), 1),
    ])


def attention_config(block_size=16):
    return reprise.ModelConfig([(reprise.KvShape(kv_heads=2, head_dim=16, block_size=block_size), 2)])


@pytest.fixture
def hybrid():
    return hybrid_config()


@pytest.fixture
def attention():
    return attention_config()
