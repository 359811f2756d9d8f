# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""One table of names for every front end: the policies, presets and metrics this package offers are the C++
catalog's (include/reprise/catalog.hpp, include/reprise/cache/metrics.hpp), the same names reprise-sim takes. A
name in one front end and not the other fails here."""

import os
import re
import subprocess
import warnings

import pytest

import reprise
from conftest import hybrid_config


def test_metrics_dict_is_the_metric_table():
    cache = reprise.PrefixCache(hybrid_config(), "memory_only", kv_blocks=8)
    names = reprise.metric_names()
    assert list(cache.metrics()) == names  # every metric, in the C++ declaration order
    assert len(set(names)) == len(names) and "host_blocks_onboarded" in names and "remote_hits" in names
    assert {"remote_turn_ends_put", "remote_turn_ends_lost", "remote_turn_end_hits"} <= set(names)


def test_policy_and_preset_names_are_the_catalogs():
    assert reprise.policy_names() == list(reprise.POLICIES)
    assert "strict" in reprise.policy_names() and "snapshot_prefill_exact" not in reprise.policy_names()
    for name in reprise.preset_names():
        assert reprise.ModelConfig.preset(name).bytes_per_kv_block > 0


def test_deprecated_names_warn_and_mean_the_catalogs_policy():
    config = hybrid_config()
    for old, now in (("snapshot_restore", "snapshot_turns"), ("snapshot_prefill_exact", "strict")):
        with pytest.warns(DeprecationWarning, match=now):
            cache = reprise.PrefixCache(config, old, kv_blocks=8, snapshot_budget_bytes=config.bytes_per_snapshot)
        assert cache.policy == old
    with pytest.warns(DeprecationWarning, match="nemotron-h-8b"):
        old = reprise.ModelConfig.preset("nemotron_h_8b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert old.bytes_per_snapshot == reprise.ModelConfig.preset("nemotron-h-8b").bytes_per_snapshot


def test_errors_name_the_rule_and_the_fix():
    with pytest.raises(reprise.UnsupportedConfig) as e:
        reprise.PrefixCache(hybrid_config(), "block_sharing", kv_blocks=8)
    assert "block_sharing_on_recurrent" in str(e.value) and "policy::snapshot_restore" in str(e.value)
    assert "no kernel instantiation" not in str(e.value)
    with pytest.raises(reprise.Misaligned) as e:
        reprise.ModelConfig([(reprise.KvShape(kv_heads=1, head_dim=8, block_size=12), 1),
                             (reprise.Mamba2Shape(heads=1, head_dim=8, state_dim=8, chunk=64), 1)])
    assert "alignment_too_coarse" in str(e.value) and "divide the largest" in str(e.value)


@pytest.mark.skipif("REPRISE_SIM" not in os.environ, reason="REPRISE_SIM (the reprise-sim binary) not set")
def test_reprise_sim_offers_the_same_names():
    sim = os.environ["REPRISE_SIM"]
    help_text = subprocess.run([sim, "replay", "--help"], check=True, capture_output=True, text=True).stdout
    listed = re.search(r"comma-separated list of: ([a-z_, ]+)", help_text).group(1)
    assert [p.strip() for p in listed.split(",")] == reprise.policy_names()
    models = subprocess.run([sim, "models"], check=True, capture_output=True, text=True).stdout.splitlines()
    rows = models[1:models.index("")]
    assert [row.split()[0] for row in rows] == reprise.preset_names()
    # Each model's policies column: the names it offers, all of them the package's.
    offered = {p for row in rows for p in row.split()[-1].split(",")}
    assert offered == set(reprise.policy_names())
