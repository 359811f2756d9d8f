# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""RepriseConnector: Reprise's prefix cache as a vLLM v1 KV connector (docs/vllm.md).

Scheduler side (one instance in vLLM's scheduler): a :class:`reprise.PrefixCache` decides what a prompt may skip.
``get_num_new_matched_tokens`` admits the prompt (its usable tokens are the external hit), ``build_connector_meta``
tells the worker what to move this step, ``update_connector_output`` commits what the step computed and completes
the step, ``request_finished_all_groups`` finishes the sequence (a turn-end snapshot under 'chat', copied out of the
request's vLLM state block in the next step, the blocks held until then) or releases it (aborted).

Worker side (one instance per worker): Reprise's pools, allocated on vLLM's device next to its KV cache tensors:
per attention layer ``[kv_blocks, block_size, ...]`` (one Reprise block id covers every attention layer), per
recurrent layer one tensor per state tensor of the layer (conv window, SSM / delta-rule matrix) ``[slots, ...]``.
Moves are torch indexing between the two, in this order each step:

1. turn-end captures (vLLM state block -> slot) of requests that finished last step;
2. copy-on-write of a turn end's partial block inside Reprise's KV pool;
3. loads: Reprise KV of tokens [0, u) -> the request's vLLM blocks, snapshot slot -> its vLLM state block;
4. (vLLM's forward pass)
5. saves: the KV of tokens this step computed, at positions Reprise owns -> Reprise's blocks; step-end captures
   (vLLM state block -> slot) where the step ended on a planned capture position.

vLLM calls step 1-3 before the forward when some request loads this step and after it otherwise; both orders are
correct (a finished request's blocks are held until its capture is done, and nothing else is read).

Requirements (checked at construction): vLLM's own prefix caching off, synchronous scheduling, no speculative
decoding, one worker (tensor / pipeline parallel 1).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats
from vllm.logger import init_logger
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.kv_cache_interface import AttentionSpec, FullAttentionSpec, KVQuantMode, MambaSpec
from vllm.v1.request import RequestStatus

import reprise

from . import CAPTURE_OFFSETS, DEFAULTS, check_vllm_version

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}

#: The least a pool takes when its budget is derived (Reprise's KV pool, its snapshot slots): small models keep as
#: many snapshots as they would under a fixed budget.
_MIN_POOL_BYTES = 256 << 20

#: The named PrefixCache policies that take capture offsets (policy::caller_offsets).
_READS_CAPTURE_OFFSETS = frozenset({"chat"})

logger = init_logger(__name__)

#: Seconds spent in each of the connector's hooks and calls, both roles, this process (see :func:`profile`).
_PROFILE: defaultdict[str, float] = defaultdict(float)


def profile(reset: bool = False) -> dict[str, float]:
    """Seconds spent so far in each hook of every connector of this process (scheduler and worker side: an
    in-process engine runs both here), and the number of calls of each as ``<hook>.calls``."""
    out = dict(_PROFILE)
    if reset:
        _PROFILE.clear()
    return out


def _timed(fn):
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _PROFILE[name] += time.perf_counter() - t
            _PROFILE[name + ".calls"] += 1

    return wrapper


# ----------------------------------------------------------------------------------------------------------------
# Geometry: vLLM's KV cache groups -> a Reprise ModelConfig, shared by both roles


@dataclass(frozen=True)
class Geometry:
    """What both roles derive alike from vLLM's configuration."""

    config: Any                      # reprise.ModelConfig
    options: dict[str, Any]
    kv_blocks: int                   # Reprise KV blocks
    slots: int                       # Reprise snapshot slots
    attention_groups: tuple[int, ...]  # vLLM KV cache group ids of attention layers
    state_groups: tuple[int, ...]      # vLLM KV cache group ids of recurrent (Mamba-type) layers
    vllm_block_size: int

    @staticmethod
    def of(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> Geometry:
        extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
        unknown = sorted(set(extra) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"reprise.vllm: unknown kv_connector_extra_config key(s) {unknown}; keys: "
                             f"{sorted(DEFAULTS)}")
        options = {**DEFAULTS, **extra}
        wait = options["stop_string_wait_s"]
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 60:
            raise ValueError(f"reprise.vllm: stop_string_wait_s must be a number of seconds in [0, 60], not {wait!r}")
        attention, state = [], []
        kv_dtype = conv_dtype = state_dtype = None
        kv_bytes_per_token = state_bytes = 0
        vllm_block = None
        for g, group in enumerate(kv_cache_config.kv_cache_groups):
            spec = group.kv_cache_spec
            n = len(group.layer_names)
            refused = _refused_layer_kind(spec)
            if refused:
                raise ValueError(f"reprise.vllm: KV cache group {g} ({group.layer_names[0]}, ...) holds {refused}; "
                                 f"the connector handles full causal attention (fp32, bf16 or fp16 KV) and Mamba2 "
                                 f"or gated-delta recurrent layers")
            if isinstance(spec, MambaSpec):
                state.append(g)
                conv_dtype, state_dtype = _DTYPES[spec.dtypes[0]], _DTYPES[spec.dtypes[-1]]
                state_bytes += n * sum(math.prod(s) * torch.empty((), dtype=d).element_size()
                                       for s, d in zip(spec.shapes, spec.dtypes))
            elif isinstance(spec, AttentionSpec):
                attention.append(g)
                kv_dtype = _DTYPES[spec.dtype]
                kv_bytes_per_token += n * 2 * spec.num_kv_heads * spec.head_size * \
                    torch.empty((), dtype=spec.dtype).element_size()
                vllm_block = spec.block_size
        if not state:
            raise ValueError("reprise.vllm: the model has no recurrent layers; use vLLM's own prefix caching")
        hf = _json_fields(vllm_config.model_config.hf_text_config.to_dict())
        config = reprise.ModelConfig.from_hf_config(hf, block_size=int(options["block_size"]), kv_dtype=kv_dtype,
                                                    state_dtype=state_dtype, conv_dtype=conv_dtype)
        # Reprise sizes its budgets by its own reading of the checkpoint; it must agree with vLLM's tensors.
        if config.bytes_per_snapshot != state_bytes or (
                attention and config.bytes_per_kv_block != kv_bytes_per_token * config.block_size):
            raise ValueError(
                f"reprise.vllm: Reprise reads {config.bytes_per_snapshot} bytes of recurrent state and "
                f"{config.bytes_per_kv_block} bytes per KV block from the checkpoint, vLLM allocates "
                f"{state_bytes} and {kv_bytes_per_token * config.block_size}: the layer shapes differ")
        slots = None
        for name in ("kv_budget_bytes", "snapshot_budget_bytes"):
            v = options[name]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"reprise.vllm: {name} must be a number of bytes (an int >= 0) or None, not {v!r}")
        if options["snapshot_budget_bytes"] is None:
            slots = max(16, 2 * vllm_config.scheduler_config.max_num_seqs, _MIN_POOL_BYTES // config.bytes_per_snapshot)
        else:
            slots = options["snapshot_budget_bytes"] // config.bytes_per_snapshot
        # An attention-free model (pure Mamba2) keeps no KV: its Reprise blocks are keys without pool memory, as
        # many as every snapshot slot's path at the longest prompt needs.
        if not config.bytes_per_kv_block:
            kv_blocks = max(1, slots) * -(-vllm_config.model_config.max_model_len // config.block_size)
        elif options["kv_budget_bytes"] is None:
            kv_blocks = max(kv_cache_config.num_blocks * (vllm_block or 0) // config.block_size,
                            _MIN_POOL_BYTES // config.bytes_per_kv_block)
        else:
            kv_blocks = options["kv_budget_bytes"] // config.bytes_per_kv_block
        return Geometry(config, options, kv_blocks, slots, tuple(attention), tuple(state), vllm_block or 0)


#: The recurrent layer kinds whose state Reprise models (reprise.ModelConfig): a Mamba2 layer's conv window and SSM
#: state, a gated-delta layer's conv window and delta-rule matrix.
_STATE_KINDS = {MambaAttentionBackendEnum.MAMBA2: "Mamba2", MambaAttentionBackendEnum.GDN_ATTN: "gated delta"}


def _refused_layer_kind(spec: Any) -> str | None:
    """What a KV cache group holds that the connector cannot keep exactly, in words; None when it can. A restore
    copies whole token rows of causal full attention and whole recurrent states: a window or chunk-local attention
    keeps only part of the prefix (its blocks are freed behind the window), a quantized KV page carries scales per
    block, and other recurrent kinds (Mamba-1, short convolutions, linear attention) have states of other shapes."""
    if isinstance(spec, MambaSpec):
        if spec.mamba_type in _STATE_KINDS:
            return None
        return f"{spec.mamba_type.name} recurrent layers (vLLM's {type(spec).__name__})"
    if not isinstance(spec, AttentionSpec):
        return f"layers of kind {type(spec).__name__}"
    if type(spec) is not FullAttentionSpec:
        return f"attention of kind {type(spec).__name__}"
    if spec.sliding_window is not None:
        return f"sliding-window attention (window {spec.sliding_window})"
    if spec.attention_chunk_size is not None:
        return f"chunked-local attention (chunks of {spec.attention_chunk_size})"
    if spec.non_causal:
        return "non-causal attention"
    if spec.kv_quant_mode != KVQuantMode.NONE or spec.dtype not in _DTYPES:
        return f"a {spec.dtype} KV cache (kv_cache_dtype); run it with kv_cache_dtype='auto'"
    return None


# ----------------------------------------------------------------------------------------------------------------
# Keys: what else, besides the token ids, vLLM's own prefix caching keys a request by


def _key64(label: bytes, *parts: bytes) -> int:
    """A nonzero 64-bit key: the first 8 bytes of SHA-256 over a label and length-prefixed parts (0 means "none" in
    Reprise's extra keys, so a value that hashes to 0 becomes 1)."""
    h = hashlib.sha256(label)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return int.from_bytes(h.digest()[:8], "little") or 1


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's raw bytes (the bytes vLLM hashes for prompt embeddings: flattened, contiguous, on the host)."""
    return t.flatten().cpu().contiguous().view(torch.uint8).numpy().tobytes()


class RequestKeys:
    """A request's Reprise extra keys, from what vLLM 0.32's prefix caching folds into its block hashes
    (``generate_block_hash_extra_keys`` in vllm/v1/core/kv_cache_utils.py), so that no request ever restores state
    another computation produced:

    - the LoRA adapter (its name and path, as vLLM keys it) -> ``lora_id``; a request without one is 0;
    - ``cache_salt`` -> ``tenant_salt``: different salts share nothing, not even a first block;
    - each multimodal item's identifier at its placeholder's offset -> a media item at that position: the prefix
      before the first item is shared with text requests, past it only the same item at the same position;
    - prompt embeddings: a digest of each Reprise block's embeddings -> a media item at the block's start (vLLM
      digests its own blocks the same way; placeholder token ids alone would let any two such prompts hit);
    - the weights: ``reset_cache`` (vLLM calls it on weight updates, sleep / wake-up and cache clears) moves every
      later request to a new ``model_revision``, so nothing cached before is restored again.
    """

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.revision = 0

    def of(self, request: Request) -> reprise.ExtraKeys:
        lora = getattr(request, "lora_request", None)
        lora_id = 0 if lora is None else _key64(b"reprise.vllm/lora", str(lora.lora_name).encode(),
                                                 str(lora.lora_path).encode())
        salt = getattr(request, "cache_salt", None)
        tenant = _key64(b"reprise.vllm/cache-salt", salt.encode()) if salt else 0
        return reprise.ExtraKeys(model_revision=self.revision, lora_id=lora_id, tenant_salt=tenant,
                                 media=self.media(request))

    def media(self, request: Request) -> list[tuple[int, bytes]]:
        """(position, 32-byte digest) items in position order; a position with several (an item and an embedding
        block starting there) gets one digest of them all."""
        at: dict[int, list[bytes]] = defaultdict(list)
        for feature in getattr(request, "mm_features", None) or ():
            at[int(feature.mm_position.offset)].append(
                hashlib.sha256(b"reprise.vllm/mm\0" + str(feature.identifier).encode()).digest())
        embeds = getattr(request, "prompt_embeds", None)
        if embeds is not None:
            B = self.block_size
            for start in range(0, int(embeds.shape[0]), B):
                at[start].append(hashlib.sha256(b"reprise.vllm/embeds\0" +
                                                _tensor_bytes(embeds[start:start + B])).digest())
        out = []
        for position in sorted(at):
            digests = at[position]
            out.append((position, digests[0] if len(digests) == 1 else hashlib.sha256(b"".join(digests)).digest()))
        return out


# ----------------------------------------------------------------------------------------------------------------
# Figures: Reprise's metrics in vLLM's stats (KVConnectorStats) and Prometheus metrics (vllm:reprise_*)

#: The figures the connector reports: name -> (kind, what). Counters count since the engine started; gauges are the
#: current occupancy. Prometheus names are ``vllm:reprise_<name>`` (counters with prometheus_client's ``_total``).
FIGURES: dict[str, tuple[str, str]] = {
    "prompt_tokens": ("counter", "prompt tokens of the requests the connector admitted"),
    "computed_prompt_tokens": ("counter", "prompt tokens vLLM computed for them"),
    "skipped_tokens": ("counter", "prompt tokens whose prefill a restore skipped"),
    "kv_matched_tokens": ("counter", "prompt tokens whose KV blocks were cached"),
    "tokens_lost_to_missing_snapshot": ("counter", "KV-matched tokens recomputed for want of a snapshot to restore"),
    "snapshot_restores": ("counter", "requests that restored a snapshot"),
    "snapshots_captured": ("counter", "snapshots captured and published"),
    "captures_refused": ("counter", "captures not planned or dropped (no slot, a step not ending there)"),
    "kv_evictions": ("counter", "cached KV blocks evicted"),
    "snapshot_evictions": ("counter", "snapshots evicted (least recently used, expired or invalidated)"),
    "untracked_requests": ("counter", "requests served without the connector (larger than its budgets)"),
    "cache_resets": ("counter", "cache resets (weight updates, sleep, cache clears)"),
    "stop_string_holds": ("counter", "replies ended on a stop string held at their turn end for vLLM's abort"),
    "stop_string_holds_unconfirmed": ("counter", "stop-string holds that no abort confirmed in time"),
    "kv_bytes_held": ("gauge", "bytes of the cached KV blocks"),
    "kv_pool_bytes": ("gauge", "bytes of Reprise's KV pool"),
    "snapshot_bytes_held": ("gauge", "bytes of the published snapshots"),
    "snapshot_pool_bytes": ("gauge", "bytes of Reprise's snapshot slots"),
}


@dataclass
class RepriseStats(KVConnectorStats):
    """One interval's figures: counters as increments over the interval, gauges as their last value."""

    def reset(self):
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for name, value in other.data.items():
            counter = FIGURES.get(name, ("counter",))[0] == "counter"
            self.data[name] = self.data.get(name, 0) + value if counter else value
        return self

    def reduce(self) -> dict[str, int | float]:
        return {f"reprise_{k}": v for k, v in self.data.items()}

    def is_empty(self) -> bool:
        return not self.data


class RepriseProm(KVConnectorPromMetrics):
    """``vllm:reprise_*`` per engine, from the intervals' RepriseStats."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._metrics: dict[tuple[str, int], Any] = {}
        for name, (kind, doc) in FIGURES.items():
            cls = self._counter_cls if kind == "counter" else self._gauge_cls
            metric = cls(name=f"vllm:reprise_{name}", documentation=f"Reprise: {doc}.", labelnames=labelnames)
            for engine, values in per_engine_labelvalues.items():
                self._metrics[name, engine] = metric.labels(*values)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        for name, value in transfer_stats_data.items():
            metric = self._metrics.get((name, engine_idx))
            if metric is None:
                continue
            if FIGURES[name][0] == "counter":
                if value:
                    metric.inc(value)
            else:
                metric.set(value)


# ----------------------------------------------------------------------------------------------------------------
# Metadata: what the worker moves in one step


@dataclass
class TokenMove:
    """KV of tokens [start, end) between a request's vLLM blocks and its Reprise blocks."""

    start: int
    end: int
    vllm_blocks: list[list[int]]   # per attention group: the vLLM block ids holding [start, end), in order
    reprise_blocks: list[int]      # the Reprise block ids holding [start, end), in order
    first_vllm_block: int = 0      # the request's block number (start // vLLM's block size) of vllm_blocks[g][0]
    first_reprise_block: int = 0   # of reprise_blocks[0] (start // Reprise's block size)


@dataclass
class StateMove:
    """Recurrent state between a request's vLLM state blocks (one per recurrent group) and a Reprise slot."""

    vllm_blocks: list[int]
    slot: int


@dataclass
class RepriseMetadata(KVConnectorMetadata):
    turn_end_captures: list[StateMove] = field(default_factory=list)
    finished_captures: list[str] = field(default_factory=list)   # request ids whose blocks vLLM holds for them
    block_copies: list[tuple[int, int]] = field(default_factory=list)   # Reprise (src, dst) blocks
    kv_loads: list[TokenMove] = field(default_factory=list)
    restores: list[StateMove] = field(default_factory=list)
    kv_saves: list[TokenMove] = field(default_factory=list)
    captures: list[StateMove] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------------------
# Stop strings seen from the engine core


class StopStringHold:
    """Keeps a reply that ends on a stop string from running past its turn end under the API server.

    vLLM finds stop strings in its frontend (the detokenizer of the output processor) and then aborts the request in
    the engine core. In-process the abort lands between two steps, so the live state holds the prompt and every reply
    token but the last, as at a stop token. Under the API server the engine core runs in its own process and goes on
    stepping while the abort travels, feeding tokens past the reply the client sees, and the turn end is lost.

    This component runs the frontend's own incremental detokenizer (vLLM's ``IncrementalDetokenizer``, same class,
    same tokenizer, same sampling parameters: stop strings, ``min_tokens``, special-token handling) over a tracked
    request's output in the engine core. When the token just sampled completes a stop string, the request's next
    step is held back (the scheduler's split hook schedules 0 tokens for it) until the frontend's abort arrives, at
    most ``wait_s`` seconds; then the state is exactly the turn end. A hold that the frontend never confirms (the
    detokenizers disagreed) costs that request ``wait_s`` and nothing else: what is cached stays keyed by the tokens
    it holds, so a wrong guess can only cost a hit, never give a wrong one. ``wait_s = 0`` turns it off."""

    def __init__(self, model_config: Any, wait_s: float):
        self.wait_s = float(wait_s)
        self._model_config = model_config
        self._tokenizer: Any = None
        # request id -> [detokenizer, output tokens fed to it], or None: not watched (no stop strings, held once)
        self._watched: dict[str, list[Any] | None] = {}
        self._held: dict[str, float] = {}          # request id -> when its hold began (time.monotonic)
        self.holds = 0                             # holds begun
        self.unconfirmed = 0                       # holds that ran out before the frontend's abort

    def enabled_for(self, request: Request) -> bool:
        params = request.sampling_params
        return (self.wait_s > 0 and params is not None and bool(params.stop)
                and not self._model_config.skip_tokenizer_init)

    def holds_back(self, request: Request) -> bool:
        """Whether `request`'s next decode step waits for the frontend's abort. Called once per step and request from
        the scheduler (decode steps only). Complexity: O(new output tokens)."""
        rid = request.request_id
        since = self._held.get(rid)
        if since is not None:
            if time.monotonic() - since < self.wait_s:
                return True
            del self._held[rid]
            self.unconfirmed += 1
            logger.warning("reprise.vllm: request %s: a stop string seen in the engine core was not confirmed by an "
                           "abort within %.3f s; the request goes on", rid, self.wait_s)
            return False
        if rid not in self._watched:
            self._watched[rid] = [self._detokenizer(request), 0] if self.enabled_for(request) else None
        watched = self._watched[rid]
        if watched is None:
            return False
        detokenizer, fed = watched
        new = request.output_token_ids[fed:]
        if not new:
            return False
        watched[1] = fed + len(new)
        if detokenizer.update(list(new), False) is None:
            return False
        self._watched[rid] = None   # one hold per request: after it, the request runs as vLLM schedules it
        self._held[rid] = time.monotonic()
        self.holds += 1
        return True

    def forget(self, request_id: str) -> None:
        self._watched.pop(request_id, None)
        self._held.pop(request_id, None)

    def _detokenizer(self, request: Request) -> Any:
        from vllm.tokenizers import cached_tokenizer_from_config
        from vllm.v1.engine.detokenizer import IncrementalDetokenizer

        if self._tokenizer is None:
            self._tokenizer = cached_tokenizer_from_config(self._model_config)
        return IncrementalDetokenizer.from_new_request(self._tokenizer, request)


# ----------------------------------------------------------------------------------------------------------------
# Scheduler-side bookkeeping of one request


@dataclass
class _Sequence:
    seq_id: int
    request: Any
    plan: Any                          # AdmitPlan
    table: list[int]                   # Reprise block table (grows with extend)
    known: int                         # tokens Reprise has (admit + extend)
    kv_from: int                       # positions < kv_from are shared blocks: never written
    captures: dict[int, int]           # planned capture position -> slot, not yet written
    start: int = -1                    # where vLLM's computation starts (0 or the hit), -1 until allocated
    load_pending: bool = False
    scheduled: bool = False
    pending_end: int = 0               # computed by the step in flight, committed once it ran
    pending_captures: list[int] = field(default_factory=list)


class RepriseConnector(KVConnectorBase_V1, SupportsHMA):
    """Reprise's prefix cache behind vLLM's KV connector interface. Options (kv_connector_extra_config):
    ``policy`` ('strict', 'chat', or another PrefixCache policy that restores snapshots), ``kv_budget_bytes``,
    ``snapshot_budget_bytes``, ``block_size``, ``max_sequences``, ``hasher_seed``."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig):
        check_vllm_version(vllm.__version__)
        super().__init__(vllm_config, role, kv_cache_config)
        _check_engine(vllm_config)
        self.geometry = Geometry.of(vllm_config, kv_cache_config)
        self._groups = kv_cache_config.kv_cache_groups
        if role == KVConnectorRole.SCHEDULER:
            g = self.geometry
            self.cache = reprise.PrefixCache(
                g.config, g.options["policy"], kv_blocks=g.kv_blocks, max_sequences=int(g.options["max_sequences"]),
                snapshot_budget_bytes=g.slots * g.config.bytes_per_snapshot, hasher_seed=int(g.options["hasher_seed"]))
            assert self.cache.kv_blocks == g.kv_blocks and self.cache.snapshot_slots == g.slots
            vllm_bytes = sum(t.size for t in kv_cache_config.kv_cache_tensors)
            logger.info("reprise.vllm: KV pool %d blocks of %d tokens (%.1f MiB), %d snapshot slots (%.1f MiB), beside "
                        "vLLM's KV cache of %.1f MiB (the pools are memory of their own: see docs/vllm.md, Memory)",
                        g.kv_blocks, g.config.block_size, g.kv_blocks * g.config.bytes_per_kv_block / 2**20, g.slots,
                        g.slots * g.config.bytes_per_snapshot / 2**20, vllm_bytes / 2**20)
            self._seqs: dict[str, _Sequence] = {}
            self._next_seq = 0
            self._turn_ends: list[tuple[str, StateMove]] = []
            self._epoch = self.cache.current_epoch()
            self._manager: KVCacheManager | None = None
            self.keys = RequestKeys(g.config.block_size)
            sched = vllm_config.scheduler_config
            self._max_prefill_tokens = sched.max_num_batched_tokens
            if sched.long_prefill_token_threshold > 0:
                self._max_prefill_tokens = min(self._max_prefill_tokens, sched.long_prefill_token_threshold)
            #: prompt tokens vLLM computed, and skipped through the connector (the figures reprise-sim reports).
            self.prefill_tokens = self.skipped_tokens = 0
            self.untracked = 0   # requests served without the connector: larger than its budgets
            self.preempted = 0   # preempted requests released (admitted again when vLLM recomputes them)
            self.ignored_offsets = 0   # requests whose capture offsets were not used (see _capture_offsets)
            self.resets = 0            # reset_cache calls
            self.unscheduled_queries = 0   # admitted by a query, then not allocated that step: released
            self.stop_strings = StopStringHold(vllm_config.model_config, g.options["stop_string_wait_s"])
            self._reported: dict[str, int] = {}   # the figures last reported to vLLM (get_kv_connector_stats)
        else:
            self._kv: dict[str, tuple[KVLayout, torch.Tensor]] = {}  # layer -> (vLLM's tensor's layout, pool)
            self._num_vllm_blocks = kv_cache_config.num_blocks
            self._state: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # layer -> [(vLLM, pool)]
            self._captured: set[str] = set()

    # ------------------------------------------------------------------------------------------------------------
    # Scheduler side

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        self._manager = kv_cache_manager

    @_timed
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        """The external hit: the prompt is admitted here (the plan holds its blocks and snapshot while vLLM allocates
        the request's own blocks). A request vLLM then does not allocate this step (no room, the token budget spent)
        is released when the step's metadata is built, so a query has no effect that outlives its step: the next
        query admits it again, against the cache as it is then."""
        seq = self._seqs.get(request.request_id)
        if seq is not None and seq.scheduled:
            # Preempted and back in the queue: vLLM recomputes it from scratch, prompt and output so far.
            self._drop(request.request_id, release=True)
            self.preempted += 1
            seq = None
        if seq is None:
            seq = self._admit(request)
            if seq is None:
                return 0, False
        return max(0, seq.plan.usable_tokens - num_computed_tokens), False

    def _admit(self, request: Request) -> _Sequence | None:
        tokens = np.asarray(request.all_token_ids[: request.num_tokens], dtype=np.int32)
        seq_id = self._next_seq
        self._next_seq += 1
        try:
            plan = self.cache.admit(seq_id, tokens, self.keys.of(request),
                                    capture_offsets=self._capture_offsets(request, len(tokens)))
        except (reprise.PoolExhausted, reprise.OutOfRange):
            # Longer than Reprise's budgets (or every block in use): vLLM serves it without the connector.
            self.untracked += 1
            return None
        seq = _Sequence(seq_id, request, plan, plan.block_table.tolist(), len(tokens), plan.kv_matched_tokens,
                        {int(p): int(s) for p, s in plan.captures.tolist()})
        self._seqs[request.request_id] = seq
        return seq

    def _capture_offsets(self, request: Request, length: int) -> list[int] | None:
        """The request's capture offsets (:func:`reprise.vllm.extra_args`) on Reprise's capture grid: each rounded
        down to the block size, those at 0 or past the prompt dropped. Offsets the policy does not read, or that are
        not a list of integers, are not used: the request is served without them and a warning names it (the
        scheduler cannot refuse a request, and raising here would stop the engine)."""
        given = (request.kv_transfer_params or {}).get(CAPTURE_OFFSETS)
        if given is None:
            return None
        policy = self.geometry.options["policy"]
        valid = isinstance(given, (list, tuple)) and all(isinstance(p, int) and not isinstance(p, bool) for p in given)
        if policy not in _READS_CAPTURE_OFFSETS or not valid:
            self.ignored_offsets += 1
            why = f"policy '{policy}' takes none" if valid else "not a list of integers"
            logger.warning("reprise.vllm: request %s: %s %r not used (%s)", request.request_id, CAPTURE_OFFSETS,
                           given, why)
            return None
        b = self.cache.block_size
        return sorted({p // b * b for p in given if b <= p <= length}) or None

    @_timed
    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int):
        seq = self._seqs.get(request.request_id)
        if seq is None or seq.start >= 0:
            return
        if num_external_tokens not in (0, seq.plan.usable_tokens):
            # The recurrent state exists at the offered position only: the load cannot be served, and vLLM 0.32 has
            # no recoverable path for a synchronous load that fails on a model with several KV cache groups (it
            # raises on block-level failures there, and request-level failures apply to asynchronous loads only).
            raise RuntimeError(f"reprise.vllm: vLLM took {num_external_tokens} of the {seq.plan.usable_tokens} "
                               f"tokens the connector offered for request {request.request_id}; the recurrent "
                               f"state exists at the offered position only")
        # 0: vLLM computes the prompt from its start; the shared blocks stay untouched (saves begin at kv_matched
        # tokens) and the captures planned after the hit stay valid.
        seq.start = num_external_tokens
        seq.load_pending = num_external_tokens > 0

    @_timed
    def split_prefill(self, request: Request, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
                      num_external_computed_tokens: int = 0) -> int:
        """Where a prefill step must end (installed by reprise.vllm.plugin into vLLM's scheduler): at the next
        planned capture position, so that the state there is the request's live state at a step's end; a step that
        vLLM's token budget cuts short ends on the alignment grid, so later captures of the prompt stay
        prefill-exact; when the budget left cannot reach the next grid point the request computes nothing this step
        (0, as vLLM's own aligned split does: it waits for a step with budget), unless no step's budget ever could
        (the alignment is larger than vLLM's largest prefill chunk). A decode step of a reply that has just completed
        a stop string computes nothing until vLLM's abort arrives (:class:`StopStringHold`)."""
        seq = self._seqs.get(request.request_id)
        start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
        if seq is None:
            return num_new_tokens
        if start >= request.num_tokens - 1:
            # decode: held back while the reply's stop string travels to the frontend and back as an abort
            return 0 if request.num_output_tokens > 0 and self.stop_strings.holds_back(request) else num_new_tokens
        end = start + num_new_tokens
        for position in sorted(seq.captures):
            if start < position < end:
                return position - start
        if end < request.num_tokens - 1:
            unit = self.geometry.config.alignment
            aligned = end // unit * unit
            if aligned > start:
                return aligned - start
            if unit <= self._max_prefill_tokens:
                return 0
        return num_new_tokens

    @_timed
    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = RepriseMetadata()
        for req_id, move in self._turn_ends:
            meta.turn_end_captures.append(move)
            meta.finished_captures.append(req_id)
        self._turn_ends = []
        for req_id in scheduler_output.preempted_req_ids or ():
            seq = self._seqs.get(req_id)
            if seq is not None and seq.scheduled:   # not yet admitted again
                self._drop(req_id, release=True)
                self.preempted += 1

        for req_id in [r for r, seq in self._seqs.items() if seq.start < 0 and not seq.scheduled]:
            self._drop(req_id, release=True)   # queried, not allocated: nothing held past this step
            self.unscheduled_queries += 1

        starts = {r.req_id: r.num_computed_tokens for r in scheduler_output.scheduled_new_reqs}
        cached = scheduler_output.scheduled_cached_reqs
        starts.update(zip(cached.req_ids, cached.num_computed_tokens))
        for req_id, count in scheduler_output.num_scheduled_tokens.items():
            seq = self._seqs.get(req_id)
            if seq is None or count <= 0:
                continue
            a, b = starts[req_id], starts[req_id] + count
            block_ids = self._manager.get_block_ids(req_id)
            states = [block_ids[g][0] for g in self.geometry.state_groups]
            if seq.load_pending:
                plan = seq.plan
                if plan.copy_src >= 0:
                    meta.block_copies.append((int(plan.copy_src), int(plan.copy_dst)))
                meta.kv_loads.append(self._token_move(0, plan.usable_tokens, block_ids, seq.table))
                meta.restores.append(StateMove(states, int(plan.restore_slot)))
                seq.load_pending = False
                self.skipped_tokens += plan.usable_tokens
            if not seq.scheduled:
                seq.scheduled = True
                if seq.start < 0:
                    seq.start = a
            if b > seq.known:   # decode (or a resumed request's replayed output): tokens Reprise has not seen
                tokens = np.asarray(seq.request.all_token_ids[seq.known:b], dtype=np.int32)
                try:
                    ext = self.cache.extend(seq.seq_id, tokens)
                except (reprise.PoolExhausted, reprise.OutOfRange):
                    # Grew past Reprise's budgets: what it committed stays cached, the rest is served without it.
                    self._drop(req_id, release=True)
                    self.untracked += 1
                    continue
                seq.table.extend(ext.new_blocks.tolist())
                for p, s in ext.captures.tolist():
                    seq.captures[int(p)] = int(s)
                seq.known = b
            if a < seq.request.num_prompt_tokens:
                self.prefill_tokens += min(b, seq.request.num_prompt_tokens) - a
            lo = max(a, seq.kv_from)
            if lo < b:
                meta.kv_saves.append(self._token_move(lo, b, block_ids, seq.table))
            if b in seq.captures:
                meta.captures.append(StateMove(states, seq.captures.pop(b)))
                seq.pending_captures.append(b)
            for p in [p for p in seq.captures if p < b]:   # passed without a step ending there: not written
                del seq.captures[p]
            seq.pending_end = b
        self._epoch = self.cache.current_epoch()
        return meta

    def _token_move(self, start: int, end: int, block_ids, table: list[int]) -> TokenMove:
        """A move of [start, end) carrying only the blocks that hold it, so that a decode step's saves cost what
        they touch (one block per request), not the length of each request's block tables."""
        B, Bv = self.geometry.config.block_size, self.geometry.vllm_block_size or 1   # 0: no attention layer
        r0, v0 = start // B, start // Bv
        r1, v1 = (end - 1) // B + 1, (end - 1) // Bv + 1
        return TokenMove(start, end, [block_ids[g][v0:v1] for g in self.geometry.attention_groups], table[r0:r1],
                         v0, r0)

    def _commit(self, seq: _Sequence) -> None:
        if seq.pending_end > 0 or seq.pending_captures:
            self.cache.commit(seq.seq_id, seq.pending_end, np.asarray(seq.pending_captures, dtype=np.int64))
            seq.pending_captures = []

    @_timed
    def update_connector_output(self, connector_output: KVConnectorOutput):
        for seq in self._seqs.values():
            self._commit(seq)
        self.cache.step_complete(self._epoch)

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished_all_groups(request, (block_ids,))

    @_timed
    def request_finished_all_groups(self, request: Request,
                                    block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
        self.stop_strings.forget(request.request_id)
        seq = self._seqs.get(request.request_id)
        if seq is None:
            return False, None
        if not self._ends_a_turn(request, seq):
            self._drop(request.request_id, release=True)
            return False, None
        self._commit(seq)
        del self._seqs[request.request_id]
        finished = self.cache.finish(seq.seq_id)
        if finished.capture_slot < 0:
            return False, None
        # The turn end: the request's live state, copied out of its vLLM state blocks before vLLM reuses them.
        states = [block_ids[g][0] for g in self.geometry.state_groups]
        self._turn_ends.append((request.request_id, StateMove(states, int(finished.capture_slot))))
        return True, None

    def reset_cache(self) -> bool:
        """vLLM resets its caches (a weight update, sleep / wake-up, ``reset_prefix_cache(reset_connector=True)``):
        every later request is keyed under a new model revision, so no state computed before is restored again.
        Requests in flight finish normally (what they publish is keyed under the old revision); the entries the
        old revision holds are evicted as the budgets need their room."""
        if self._role == KVConnectorRole.SCHEDULER:
            self.keys.revision += 1
            self.resets += 1
            logger.info("reprise.vllm: cache reset (model revision %d): nothing cached before is restored",
                        self.keys.revision)
        return True

    @staticmethod
    def _ends_a_turn(request: Request, seq: _Sequence) -> bool:
        """Whether a finished request's live state is a turn end: it stopped (EOS, a stop token id), reached its
        length, or was aborted after its prompt was computed. vLLM aborts a request whose reply ends on a stop string
        (the detokenizer finds it, after the step that sampled it) and one whose client went away; with synchronous
        scheduling an abort is handled between steps, so the state holds exactly the tokens the connector committed,
        as at a stop. A request aborted during its prefill, preempted, or ended by an error keeps nothing."""
        if not seq.scheduled:
            return False
        if request.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED):
            return True
        return request.status == RequestStatus.FINISHED_ABORTED and seq.pending_end >= request.num_prompt_tokens

    def has_pending_block_frees(self) -> bool:
        return bool(self._turn_ends)

    def _drop(self, req_id: str, release: bool) -> None:
        self.stop_strings.forget(req_id)
        seq = self._seqs.pop(req_id)
        if seq.scheduled:
            self._commit(seq)
        if release:
            self.cache.release(seq.seq_id)

    def figures(self) -> dict[str, int]:
        """The values of :data:`FIGURES` now."""
        m, c = self.cache.metrics(), self.geometry.config
        return {
            "prompt_tokens": m["prompt_tokens"], "computed_prompt_tokens": self.prefill_tokens,
            "skipped_tokens": self.skipped_tokens, "kv_matched_tokens": m["kv_matched_tokens"],
            "tokens_lost_to_missing_snapshot": m["tokens_lost_to_missing_snapshot"],
            "snapshot_restores": m["snapshot_hits"], "snapshots_captured": m["captures_written"],
            "captures_refused": m["captures_refused"], "kv_evictions": m["kv_evictions"],
            "snapshot_evictions": m["snapshot_evictions_capacity"] + m["snapshot_evictions_ttl"]
            + m["snapshot_evictions_invalidated"],
            "untracked_requests": self.untracked, "cache_resets": self.resets,
            "stop_string_holds": self.stop_strings.holds,
            "stop_string_holds_unconfirmed": self.stop_strings.unconfirmed,
            "kv_bytes_held": m["blocks_cached"] * c.bytes_per_kv_block,
            "kv_pool_bytes": self.geometry.kv_blocks * c.bytes_per_kv_block,
            "snapshot_bytes_held": m["snapshot_bytes_held"],
            "snapshot_pool_bytes": self.geometry.slots * c.bytes_per_snapshot,
        }

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        """vLLM's scheduler asks after every step: the counters' increments since the last report and the gauges
        that changed (None when nothing did)."""
        if self._role != KVConnectorRole.SCHEDULER:
            return None
        now = self.figures()
        delta = {}
        for name, value in now.items():
            last = self._reported.get(name, 0)
            if FIGURES[name][0] == "counter":
                if value != last:
                    delta[name] = value - last
            elif value != last or name not in self._reported:
                delta[name] = value
        self._reported = now
        return RepriseStats(data=delta) if delta else None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return RepriseStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return RepriseProm(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def metrics(self) -> dict[str, int]:
        """The prefix cache's metrics, plus the prompt tokens vLLM computed and skipped through the connector."""
        return {**self.cache.metrics(), "vllm_prefill_tokens": self.prefill_tokens,
                "vllm_skipped_tokens": self.skipped_tokens, "vllm_cache_resets": self.resets}

    # ------------------------------------------------------------------------------------------------------------
    # Worker side

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        g = self.geometry
        B = g.config.block_size
        context = self._vllm_config.compilation_config.static_forward_context
        seen: list[KVLayout] = []   # layers of one layout share its offsets, and so a step's indices
        for group_id in g.attention_groups:
            for name in self._groups[group_id].layer_names:
                t = kv_caches[name]
                layout = KVLayout.of(t, context.get(name), g.vllm_block_size, self._num_vllm_blocks)
                for other in seen:
                    if (other.block_stride == layout.block_stride and other.offsets.device == layout.offsets.device
                            and other.offsets.shape == layout.offsets.shape
                            and torch.equal(other.offsets, layout.offsets)):
                        layout.offsets = other.offsets
                        break
                else:
                    seen.append(layout)
                pool = torch.zeros((g.kv_blocks, B, layout.offsets.shape[1]), dtype=t.dtype, device=t.device)
                self._kv[name] = (layout, pool)
        for group_id in g.state_groups:
            spec = self._groups[group_id].kv_cache_spec
            for name in self._groups[group_id].layer_names:
                tensors = kv_caches[name]
                if isinstance(tensors, (list, tuple)):   # one typed tensor per state tensor, [blocks, ...]
                    live = [t for t in tensors]
                else:   # the raw page of each block: the state tensors, then padding up to the attention page
                    try:   # (a view, never a copy: a page whose elements are not one run cannot be a row)
                        rows = tensors.view(tensors.shape[0], -1)
                    except RuntimeError as e:
                        raise ValueError(f"reprise.vllm: layer {name}: a raw state page tensor of shape "
                                         f"{list(tensors.shape)} and strides {tensors.stride()} whose pages are not "
                                         f"contiguous rows: {e}") from None
                    live = [rows[:, : spec.real_page_size_bytes]]
                self._state[name] = [(t, torch.zeros((g.slots, *t.shape[1:]), dtype=t.dtype, device=t.device))
                                     for t in live]

    @_timed
    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, RepriseMetadata)
        for move in meta.turn_end_captures:
            self._copy_state(move, to_slot=True)
        self._captured.update(meta.finished_captures)
        for src, dst in meta.block_copies:
            for _, pool in self._kv.values():
                pool[dst] = pool[src]
        self._copy_tokens(meta.kv_loads, to_reprise=False)
        for move in meta.restores:
            self._copy_state(move, to_slot=False)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        return   # saved for every layer at once in wait_for_save, after the forward pass

    @_timed
    def wait_for_save(self):
        meta = self._get_connector_metadata()
        assert isinstance(meta, RepriseMetadata)
        self._copy_tokens(meta.kv_saves, to_reprise=True)
        for move in meta.captures:
            self._copy_state(move, to_slot=True)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        done, self._captured = self._captured, set()
        return (done or None), None

    def _copy_state(self, move: StateMove, to_slot: bool) -> None:
        for group_id, block in zip(self.geometry.state_groups, move.vllm_blocks):
            for name in self._groups[group_id].layer_names:
                for live, pool in self._state[name]:
                    if to_slot:
                        pool[move.slot] = live[block]
                    else:
                        live[block] = pool[move.slot]

    def _copy_tokens(self, moves: list[TokenMove], to_reprise: bool) -> None:
        """The KV of every move of a step: one indexed copy per attention layer (the token ranges of all requests
        together; no two write the same position)."""
        moves = [m for m in moves if m.end > m.start]
        if not moves or not self.geometry.attention_groups:   # (an attention-free model moves no KV)
            return
        B, Bv = self.geometry.config.block_size, self.geometry.vllm_block_size
        positions = [np.arange(m.start, m.end, dtype=np.int64) for m in moves]
        ri = np.concatenate([np.asarray(m.reprise_blocks, dtype=np.int64)[p // B - m.first_reprise_block]
                             for m, p in zip(moves, positions)])
        every = np.concatenate(positions)
        ro, vo = every % B, every % Bv
        for g, group_id in enumerate(self.geometry.attention_groups):
            vi = np.concatenate([np.asarray(m.vllm_blocks[g], dtype=np.int64)[p // Bv - m.first_vllm_block]
                                 for m, p in zip(moves, positions)])
            index = elements = None
            for name in self._groups[group_id].layer_names:
                layout, pool = self._kv[name]
                if index is None:   # the layers of a group share the device
                    dev = pool.device
                    index = [torch.from_numpy(t).to(dev, non_blocking=True) for t in (vi, vo, ri, ro)]
                if elements is None or elements[0] is not layout.offsets:   # [tokens, elements of one token]
                    elements = (layout.offsets, layout.elements(index[0], index[1]))
                if to_reprise:
                    pool[index[2], index[3]] = layout.flat[elements[1]]
                else:
                    layout.flat[elements[1]] = pool[index[2], index[3]]


@dataclass
class KVLayout:
    """Where one attention layer's KV elements sit in vLLM's cache tensor, from the tensor's own shape and strides, so
    that any layout (a strided or permuted view included) is moved by indexing its storage, never by reshaping it:
    element e of token j of vLLM block b is ``flat[b * block_stride + offsets[j, e]]``."""

    flat: torch.Tensor     # 1-D view of the tensor's storage from the tensor's first element on
    block_stride: int      # elements from one vLLM block to the next
    offsets: torch.Tensor  # int64 [block_size, elements per token]

    def elements(self, blocks: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Storage indices [n, elements per token] of the tokens at (vLLM block, token in block) pairs."""
        return blocks[:, None] * self.block_stride + self.offsets[tokens]

    @staticmethod
    def of(t: torch.Tensor, layer: Any, block_size: int, num_blocks: int) -> KVLayout:
        """The layout of `t`. vLLM's CPU backend (a layer with an ``isa``) packs K in ISA-specific tiles inside a
        block: its offsets are read from its own write op. Other backends: the tensor's logical layout, found from its
        shape (one dimension of `num_blocks` vLLM blocks, one of `block_size` tokens; any others, such as K/V, heads
        and head size, are a token's elements). A tensor with neither dimension fails here, at start."""
        dims, strides = list(t.shape), list(t.stride())
        size = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
        flat = t.as_strided((size,), (1,), t.storage_offset())
        isa = getattr(layer, "isa", None)
        if isa is not None:
            ids = _cpu_block_offsets(t, isa)           # element ids, row-major over one block's dims
            return KVLayout(flat, strides[0], _storage_offsets(dims[1:], strides[1:], ids).to(t.device))
        block_dims = [i for i, n in enumerate(dims) if n == num_blocks]
        token_dims = [i for i, n in enumerate(dims) if n == block_size and i not in block_dims]
        if len(block_dims) != 1 or len(token_dims) != 1:
            # (a shape alone cannot tell which of two equal dimensions is which: refused rather than guessed)
            raise ValueError(f"reprise.vllm: a KV cache tensor of shape {dims}: not one dimension of {num_blocks} "
                             f"blocks and one of {block_size} tokens; the connector cannot tell its layout")
        bdim, tdim = block_dims[0], token_dims[0]
        rest = [i for i in range(len(dims)) if i not in (bdim, tdim)]
        ids = torch.arange(math.prod(dims[i] for i in rest), dtype=torch.int64)
        per_token = _storage_offsets([dims[i] for i in rest], [strides[i] for i in rest], ids)
        offsets = torch.arange(block_size, dtype=torch.int64)[:, None] * strides[tdim] + per_token[None, :]
        return KVLayout(flat, strides[bdim], offsets.to(t.device))


def _storage_offsets(dims: list[int], strides: list[int], ids: torch.Tensor) -> torch.Tensor:
    """Storage offsets (by `strides`) of the elements whose row-major ids over `dims` are `ids` (any shape)."""
    out = torch.zeros_like(ids)
    rest = ids.clone()
    for n, stride in zip(reversed(dims), reversed(strides)):
        out += (rest % n) * stride
        rest //= n
    return out


def _cpu_block_offsets(t: torch.Tensor, isa: str) -> torch.Tensor:
    """Where each token's K and V elements sit inside one vLLM block of vLLM's CPU backend: int64 [block_size,
    elements per token] of row-major element ids of the block ([kv heads, block_size, 2 * head_size]). The backend
    keeps V row-major but packs K in ISA-specific tiles across tokens, so the ids are read from its own write op
    (cpu_attn_reshape_and_cache) on a scratch block, each id written as base-128 digits (exact in bf16)."""
    from vllm import _custom_ops as ops

    _, heads, tokens, channels = t.shape   # [blocks, kv heads, block_size, 2 * head_size]
    head = channels // 2
    per_block = heads * tokens * channels
    slots = torch.arange(tokens, dtype=torch.int64)
    # Token-major element ids: token t, head h, K (0) or V (1), dim d.
    ids = torch.arange(tokens * heads * 2 * head, dtype=torch.int64).view(tokens, heads, 2, head)
    found = torch.zeros(per_block, dtype=torch.int64)
    scale = 1
    while scale < per_block:   # base-128 digits: integers below 256 are exact in every float type
        value = (ids // scale) % 128
        scratch = torch.zeros((1, heads, tokens, channels), dtype=t.dtype)
        kv = scratch.view(1, heads, tokens * 2, -1)
        key_cache, value_cache = kv.chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(value[:, :, 0].to(t.dtype).contiguous(),
                                       value[:, :, 1].to(t.dtype).contiguous(), key_cache, value_cache, slots, isa)
        found += scratch.reshape(-1).to(torch.float32).round().to(torch.int64) * scale
        scale *= 128
    offsets = torch.empty(tokens * heads * 2 * head, dtype=torch.int64)
    offsets[found] = torch.arange(per_block, dtype=torch.int64)
    if not torch.equal(torch.sort(found).values, torch.arange(per_block)):
        raise ValueError(f"reprise.vllm: the KV layout of ISA '{isa}' is not a permutation of the block's elements")
    return offsets.view(tokens, heads * 2 * head)


def _json_fields(d: dict[str, Any]) -> dict[str, Any]:
    """The fields of a config that JSON can hold (Reprise's reader parses JSON; transformers' dicts may hold
    dtypes and infinities, in fields that name no layer shape)."""
    out = {}
    for k, v in d.items():
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError):
            continue
        out[k] = v
    return out


def _check_engine(vllm_config: VllmConfig) -> None:
    problems = []
    if vllm_config.cache_config.enable_prefix_caching:
        problems.append("vLLM's own prefix caching (enable_prefix_caching=False)")
    if vllm_config.scheduler_config.async_scheduling:
        problems.append("asynchronous scheduling (async_scheduling=False)")
    if vllm_config.speculative_config is not None:
        problems.append("speculative decoding")
    p = vllm_config.parallel_config
    if p.tensor_parallel_size != 1 or p.pipeline_parallel_size != 1:
        problems.append("tensor or pipeline parallelism")
    if problems:
        raise ValueError("reprise.vllm: turn off " + ", ".join(problems) + ": the connector does not support it")
