# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Reprise inside vLLM: a KV connector (docs/vllm.md).

:class:`RepriseConnector` is a vLLM v1 KV connector (``KVConnectorBase_V1`` + ``SupportsHMA``) whose scheduler side
takes its reuse decisions from :class:`reprise.PrefixCache` and whose worker side copies KV token ranges and
recurrent state (conv window + SSM / delta-rule matrix) between vLLM's cache tensors and Reprise's own pools with
torch, on whatever device vLLM runs. :func:`kv_transfer_config` builds the ``kv_transfer_config`` that loads it.

:mod:`reprise.vllm.plugin` is a ``vllm.general_plugins`` entry point: it lets the connector end a prefill step where
Reprise captures a snapshot (one attribute of vLLM's scheduler). Under a vLLM release it does not support it warns
and changes nothing (vLLM loads general plugins in every process, connector or not); the connector itself then
refuses to start.

Importing this package does not import vLLM; :mod:`reprise.vllm.connector` does.
"""

from __future__ import annotations

from typing import Any

#: The vLLM release the connector and the scheduler patch were written and tested against. Its patch releases and
#: local builds (``0.32.1``, ``0.32.0+cpu``) are accepted; other releases and pre-releases are not.
VLLM_VERSION = "0.32.0"

#: kv_connector_extra_config keys the connector reads, with their defaults.
DEFAULTS: dict[str, Any] = {
    "policy": "strict",               # 'strict' or 'chat' (any PrefixCache policy that restores snapshots)
    # Reprise's KV pool, in bytes of the model's attention KV. None: as many tokens as vLLM's own KV cache has slots
    # (vLLM's blocks x its block size), so that Reprise can keep what vLLM's cache can hold at once; at least 256 MiB.
    "kv_budget_bytes": None,
    # Reprise's snapshot slots, in bytes of whole-model recurrent state. None: two snapshots per sequence vLLM runs at
    # once (max_num_seqs; a turn end and a branch point each), at least 16 whatever the model's snapshot size, and at
    # least 256 MiB.
    "snapshot_budget_bytes": None,
    "block_size": 16,                 # Reprise's block size (8..256); vLLM's own block size is unrelated
    "max_sequences": 256,
    "hasher_seed": 1,
    "stop_string_wait_s": 1.0,        # a reply ending on a stop string waits this long for vLLM's abort (0: off)
}


#: Where a request passes Reprise its capture offsets: ``SamplingParams(extra_args={"kv_transfer_params":
#: {CAPTURE_OFFSETS: [...]}})``, as :func:`extra_args` builds it.
CAPTURE_OFFSETS = "reprise_capture_offsets"


def extra_args(capture_offsets: list[int]) -> dict[str, Any]:
    """``SamplingParams(extra_args=...)`` for a request whose prompt has parts other requests share: pass where they
    end (a system prompt's end, in tokens). Under policy 'chat' the connector rounds each down to Reprise's block size
    and snapshots the state there as the request is prefilled, so the next conversation over the same system prompt
    restores there the first time it meets it (without them, only from the third conversation on). Other policies
    ignore them (with a warning)."""
    return {"kv_transfer_params": {CAPTURE_OFFSETS: [int(p) for p in capture_offsets]}}


class VersionMismatch(RuntimeError):
    """The installed vLLM is not the release the connector was tested with."""


def supported_vllm_version(version: str) -> bool:
    """Whether `version` is :data:`VLLM_VERSION`'s release series: the same major and minor version, a final release
    (any patch level, any local label such as ``+cpu``), not a pre- or development release."""
    import re

    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(\+[A-Za-z0-9.]+)?", version)
    want = VLLM_VERSION.split(".")
    return m is not None and (m.group(1), m.group(2)) == (want[0], want[1]) and int(m.group(3)) >= int(want[2])


def check_vllm_version(version: str) -> None:
    """Raises VersionMismatch unless :func:`supported_vllm_version`."""
    if not supported_vllm_version(version):
        raise VersionMismatch(
            f"reprise.vllm: vLLM {version} is installed, but the connector and its scheduler patch were written "
            f"and tested against vLLM {VLLM_VERSION} only (scripts/fetch-vllm.sh installs it); the scheduler "
            f"internals they rely on change between releases")


def kv_transfer_config(**options: Any) -> dict[str, Any]:
    """The ``kv_transfer_config`` that loads the connector, e.g. ``LLM(..., kv_transfer_config=
    reprise.vllm.kv_transfer_config(policy='chat'))``. Unknown options are a ValueError."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"reprise.vllm: unknown option(s) {unknown}; options: {sorted(DEFAULTS)}")
    return {"kv_connector": "RepriseConnector", "kv_connector_module_path": "reprise.vllm.connector",
            "kv_role": "kv_both", "kv_connector_extra_config": dict(options)}
