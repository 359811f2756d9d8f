# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Reprise's prefix cache in mlx-lm's server, through the methods the server calls on its ``LRUPromptCache``.

How mlx-lm's engine memory maps onto Reprise:

| mlx-lm | Reprise |
|---|---|
| ``KVCache`` of an attention layer (``keys`` / ``values`` ``[1, kv heads, tokens, head dim]``) | one Reprise block id covers every attention layer: ``kv_pool[block]`` holds that block's tokens of each layer |
| ``ArraysCache`` of a recurrent layer (conv window + SSM / delta-rule state) | one slot id covers every recurrent layer: ``slots[slot]`` holds each layer's arrays |
| ``CacheList`` of a layer that runs several mixers side by side (Falcon-H1: an ``ArraysCache`` and a ``KVCache``) | each member counts as its own attention or recurrent layer, addressed by its path (layer, member) |
| a request (the server's prompt, its segments, ``insert_cache`` at segment ends and at its end) | a sequence: admit (plan) -> restore -> prefill segments ending at capture positions -> capture, commit -> extend (the reply) -> finish (turn end) |

The flow of one request, all on the server's generation thread (the one thread that drives the cache):

1. ``plan`` (from the server's tokenization, :class:`reprise.mlx.server.RepriseResponseGenerator`): admit the prompt;
   the prompt's segments become [0, u) (skipped), then pieces that end at each planned capture position, then the
   rest. mlx-lm's batch generator stops a prefill at each segment end and hands the state there to
   ``insert_cache``.
2. ``fetch_nearest_cache``: restore: a fresh mlx-lm cache whose KVCaches hold the shared blocks' KV of [0, u)
   (copied out of the pool) and whose ArraysCaches hold the snapshot's arrays; the server prefills [u, L).
3. ``insert_cache`` at a segment end p: save the KV of the tokens computed so far into the sequence's own blocks,
   capture the recurrent state into the planned slot, commit(p).
4. ``insert_cache`` at the request's end (all prompt and reply tokens, the live state after the last of them):
   extend by the reply, save its KV, commit, finish; the turn end's slot receives the live state.
5. A request the server drops from its batch (its client gone; no prompt cache call from mlx-lm): ``abandon``, from
   the launcher's batch generator, ends its sequence where its state was, or releases it if still in its prefill.

Every array in the pools is a copy made with ``mx.contiguous`` (an mlx-lm cache's arrays are slices of buffers the
engine keeps growing); MLX arrays are values, so a pool entry handed to a request's cache is never written through.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, make_prompt_cache

import reprise

logger = logging.getLogger("reprise.mlx")

#: Options of :class:`PromptCache` (the launcher's --reprise-* flags), with their defaults.
DEFAULTS: dict[str, Any] = {
    "policy": "chat",
    # Byte budgets of Reprise's pools: the snapshot budget holds four ~470 MiB snapshots (a 27B hybrid's) by default.
    "kv_budget_bytes": 2 << 30,
    "snapshot_budget_bytes": 2 << 30,
    "block_size": 16,
    "max_sequences": 64,
    "hasher_seed": None,
    "model_revision": None,   # None: the model directory's config.json and weight files, digested
    "check_invariants": False,   # PrefixCache.check_invariants() after every request (tests)
}
#: Policies a hybrid model may use here; an attention-only model always runs under 'block_sharing'.
HYBRID_POLICIES = ("strict", "chat")
# mlx-lm's CPU Mamba2 prefill (mlx_lm.models.ssm.ssm_attn) runs in 256-token steps from the start of each prefill
# call: a state is prefill-exact only on that grid, whatever chunk the checkpoint names.
MLX_MAMBA2_CHUNK = 256
_MAMBA2_TYPES = ("nemotron_h", "mamba2", "falcon_h1", "granitemoehybrid", "plamo2")


def cache_leaves(cache: list[Any]) -> list[tuple[tuple[int, ...], Any]]:
    """Each layer's cache with its path in the model's cache list: (layer,) for a plain cache, (layer, member) for
    the members of a CacheList (Falcon-H1's layers hold a Mamba2 ArraysCache and an attention KVCache)."""
    out = []
    for i, c in enumerate(cache):
        if type(c) is CacheList:
            out += [((i,) + path, leaf) for path, leaf in cache_leaves(list(c.caches))]
        else:
            out.append(((i,), c))
    return out


def cache_at(cache: list[Any], path: tuple[int, ...]) -> Any:
    c = cache[path[0]]
    for j in path[1:]:
        c = c[j]
    return c


def cache_layout(model: Any) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The paths of the model's attention (KVCache) and recurrent (ArraysCache) caches in mlx-lm's cache list, in
    its order; ValueError naming any other kind of cache, which Reprise cannot hold (a sliding window's
    RotatingKVCache, a quantized or chunked KV cache)."""
    leaves = cache_leaves(make_prompt_cache(model))
    attention = [p for p, c in leaves if type(c) is KVCache]
    recurrent = [p for p, c in leaves if type(c) is ArraysCache]
    other = sorted({type(c).__name__ for p, c in leaves if type(c) not in (KVCache, ArraysCache)})
    if other:
        raise ValueError(f"reprise.mlx: the model's mlx-lm cache has {other} layers; Reprise handles mlx-lm's "
                         f"KVCache (attention) and ArraysCache (recurrent) layers")
    return attention, recurrent


def check_layout(model: Any, config: Any) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """cache_layout(model), checked against Reprise's reading of its config.json (`config`, a ModelConfig): the
    budgets are sized by that reading, so a cache list with other layer counts is refused rather than served."""
    attention, recurrent = cache_layout(model)
    if (len(attention), len(recurrent)) != (config.attention_layers, config.recurrent_layers):
        raise ValueError(f"reprise.mlx: mlx-lm's cache for this model has {len(attention)} attention and "
                         f"{len(recurrent)} recurrent layers, but Reprise reads config.json as "
                         f"{config.attention_layers} attention and {config.recurrent_layers} recurrent layers")
    return attention, recurrent


def model_config(config: dict, block_size: int) -> Any:
    """Reprise's ModelConfig of a checkpoint's config.json as mlx-lm computes it (the Mamba2 chunk it really uses)."""
    hf = dict(config)
    if hf.get("model_type") in _MAMBA2_TYPES:
        hf["chunk_size"] = hf["mamba_chunk_size"] = MLX_MAMBA2_CHUNK
    return reprise.ModelConfig.from_hf_config(hf, block_size=block_size)


def model_revision(directory: str | Path) -> str:
    """A name for a model directory's weights: the digest of its config.json and of each weight file's name, size
    and modification time (reading the weights themselves would cost seconds per GB at start)."""
    d = Path(directory)
    h = hashlib.sha256((d / "config.json").read_bytes())
    for f in sorted(d.glob("*.safetensors")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{d.resolve()}@{h.hexdigest()[:16]}"


def _id64(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") >> 1


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options with defaults filled in; ValueError naming the first bad one."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"reprise.mlx: unknown option(s) {unknown}; options: {sorted(DEFAULTS)}")
    o = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    # The names are Reprise's own (reprise.POLICIES): a renamed policy shows here, not as a silent default.
    missing = [p for p in HYBRID_POLICIES + ("block_sharing",) if p not in reprise.POLICIES]
    if missing:
        raise ValueError(f"reprise.mlx: this reprise package has no policy {missing}")
    if o["policy"] not in HYBRID_POLICIES + ("block_sharing",):
        raise ValueError(f"reprise.mlx: policy '{o['policy']}' is not one this integration runs: "
                         f"{list(HYBRID_POLICIES)} (hybrid models) or 'block_sharing' (attention-only models)")
    if not isinstance(o["check_invariants"], bool):
        raise ValueError(f"reprise.mlx: check_invariants must be true or false, not {o['check_invariants']!r}")
    for k in ("kv_budget_bytes", "snapshot_budget_bytes", "block_size", "max_sequences"):
        if not isinstance(o[k], int) or isinstance(o[k], bool) or o[k] <= 0:
            raise ValueError(f"reprise.mlx: {k} must be a positive integer, not {o[k]!r}")
    return o


@dataclass
class _Sequence:
    seq_id: int
    tokens: list[int]                 # the prompt
    plan: Any                         # AdmitPlan
    table: list[int]                  # Reprise block table (grows with extend)
    captures: dict[int, int]          # planned capture position -> slot, not yet written
    splits: list[int]                 # segment ends the prefill stops at (captures, and u)
    fetched: bool = False
    saved: int = 0                    # KV saved into Reprise's blocks for positions < saved
    committed: int = 0
    started: float = field(default_factory=time.perf_counter)
    restore_s: float = 0.0


class _ModelCache:
    """One Reprise PrefixCache and its pools for one model (mlx-lm's server may load several in turn)."""

    def __init__(self, model: Any, model_dir: str, options: dict[str, Any]):
        config = json.loads((Path(model_dir) / "config.json").read_text())
        self.config = model_config(config, options["block_size"])
        # Paths into mlx-lm's cache list (cache_at), in its order: kv_pool and slots hold one entry per path.
        self.attention, self.recurrent = check_layout(model, self.config)
        # An empty cache list to copy for each restore: holding the model instead would keep its weights alive after
        # the server loads another model (and this one again, as a new object).
        self.empty_cache = make_prompt_cache(model)
        hybrid = bool(self.recurrent)
        policy = options["policy"] if hybrid else "block_sharing"
        if hybrid and policy not in HYBRID_POLICIES:
            raise ValueError(f"reprise.mlx: a hybrid model needs policy {list(HYBRID_POLICIES)}, not '{policy}'")
        self.kv_blocks = options["kv_budget_bytes"] // max(1, self.config.bytes_per_kv_block)
        if self.kv_blocks == 0:
            raise ValueError(f"reprise.mlx: kv_budget_bytes {options['kv_budget_bytes']} holds no KV block of this "
                             f"model ({self.config.bytes_per_kv_block} bytes each)")
        kwargs = {}
        if hybrid:
            slots = options["snapshot_budget_bytes"] // self.config.bytes_per_snapshot
            if slots == 0:
                raise ValueError(f"reprise.mlx: snapshot_budget_bytes {options['snapshot_budget_bytes']} holds no "
                                 f"snapshot of this model ({self.config.bytes_per_snapshot} bytes each)")
            kwargs["snapshot_budget_bytes"] = slots * self.config.bytes_per_snapshot
        if options["hasher_seed"] is not None:
            kwargs["hasher_seed"] = int(options["hasher_seed"])
        self.cache = reprise.PrefixCache(self.config, policy, kv_blocks=self.kv_blocks,
                                         max_sequences=options["max_sequences"], **kwargs)
        self.policy = policy
        self.block_size = self.cache.block_size
        self.kv_pool: dict[int, list[tuple[mx.array, mx.array]]] = {}   # block id -> per attention layer (k, v)
        self.slots: dict[int, list[list[mx.array | None]]] = {}       # slot id -> per recurrent layer arrays
        self.epoch = self.cache.current_epoch()

    def step_done(self) -> None:
        # The server runs each prefill piece and decode step to completion (mx.eval) before it calls the cache, so
        # nothing Reprise frees is still read: every call ends its step.
        self.cache.step_complete(self.epoch)
        self.epoch = self.cache.current_epoch()


class PromptCache:
    """Reprise in the place of mlx-lm's ``LRUPromptCache`` (same methods, same thread). Options: :data:`DEFAULTS`.

    Keys come from the server's model key (model path, adapter path, draft model): the model's revision and the
    adapter go into every block key through ``reprise.ExtraKeys(model_revision=..., lora_id=...)``, so different
    weights or adapters never share state. One PrefixCache per model (its geometry), created at first use.

    A failure inside a call (a bug, never a cache miss) must not stop the server's generation thread: the request
    is then served without Reprise, its sequence released, and the error logged."""

    def __init__(self, **options: Any):
        self.options = check_options(options)
        self._models: dict[tuple, _ModelCache] = {}
        self._revisions: dict[str, str] = {}
        self._seqs: list[tuple[tuple, _Sequence]] = []   # live sequences, oldest first
        self._next_seq = 0
        self._lock = threading.Lock()   # the HTTP threads read the figures while the generation thread runs
        #: What the server did with Reprise, summed over requests (also served at GET /reprise/metrics).
        self.figures = {"requests": 0, "finished": 0, "prompt_tokens": 0, "skipped_tokens": 0, "kv_matched_tokens": 0,
                        "restores": 0, "captures": 0, "turn_end_captures": 0, "untracked": 0, "abandoned": 0,
                        "restore_copy_s": 0.0, "capture_copy_s": 0.0}
        self._last_fetched: _Sequence | None = None
        self.last_request: dict[str, Any] = {}
        self._model_metrics: dict[str, dict[str, Any]] = {}   # copies taken on the generation thread

    # ------------------------------------------------------------------------------------------------------------
    # Called from the server's tokenization (reprise.mlx.server): admit and plan the prompt's segments

    def plan(self, model: Any, model_key: tuple, prompt: list[int], system_end: int = 0) -> list[int] | None:
        """Admits `prompt` and returns the positions where its prefill must stop (u first when u > 0, then the
        planned capture positions), or None when Reprise does not serve it (larger than the budgets)."""
        try:
            mc = self._model(model, model_key)
            keys = self._keys(model_key)
        except Exception:   # a model Reprise cannot read (no local config.json, unknown layers): mlx-lm serves it
            logger.exception("reprise.mlx: model %s served without Reprise", model_key[0])
            with self._lock:
                self.figures["untracked"] += 1
            return None
        offsets = None
        if mc.policy == "chat" and system_end >= mc.block_size:
            # The system prompt's end, where the next conversation over it restores. On the alignment grid when the
            # prompt reaches it: that capture is prefill-exact, so a later prompt also shares the KV computed after
            # it and meets the branch where it leaves this one. Off the grid (on the block grid, below the
            # alignment) it is a decode continuation, after which a later prompt shares no KV (measured on
            # Nemotron-H, alignment 256 here; Qwen3-Next's 64 puts most system ends on the grid).
            unit = mc.cache.alignment if system_end >= mc.cache.alignment else mc.block_size
            offsets = [system_end // unit * unit]
        seq_id = self._next_seq
        self._next_seq += 1
        try:
            plan = mc.cache.admit(seq_id, np.asarray(prompt, dtype=np.int32), extra_keys=keys,
                                  capture_offsets=offsets)
        except (reprise.PoolExhausted, reprise.OutOfRange) as e:
            logger.warning("reprise.mlx: prompt of %d tokens served without Reprise (%s)", len(prompt), e)
            with self._lock:
                self.figures["untracked"] += 1
            return None
        captures = {int(p): int(s) for p, s in plan.captures.tolist()}
        u = int(plan.usable_tokens)
        splits = ([u] if u > 0 else []) + sorted(captures)
        seq = _Sequence(seq_id, list(prompt), plan, plan.block_table.tolist(), captures, splits,
                        saved=int(plan.kv_matched_tokens), committed=u)
        self._seqs.append((model_key, seq))
        return splits

    # ------------------------------------------------------------------------------------------------------------
    # LRUPromptCache's interface

    def fetch_nearest_cache(self, model_key: tuple, tokens: list[int]):
        """Restore: the mlx-lm cache of the admitted sequence for `tokens` at its usable hit, and the tokens still
        to compute; (None, tokens) when nothing is skipped."""
        self._last_fetched = None
        found = self._find(model_key, lambda s: not s.fetched and s.tokens == list(tokens))
        if found is None:
            return None, tokens
        mc, seq = found
        seq.fetched = True
        self._last_fetched = seq
        try:
            return self._restore(mc, seq, tokens)
        except Exception:
            logger.exception("reprise.mlx: restore failed; the request is served without Reprise")
            self._abandon(mc, seq)
            return None, tokens

    def _restore(self, mc: _ModelCache, seq: _Sequence, tokens: list[int]):
        plan = seq.plan
        u = int(plan.usable_tokens)
        with self._lock:
            self.figures["requests"] += 1
            self.figures["prompt_tokens"] += len(tokens)
            self.figures["skipped_tokens"] += u
            self.figures["kv_matched_tokens"] += int(plan.kv_matched_tokens)
        if u == 0:
            return None, tokens
        tic = time.perf_counter()
        if plan.copy_src >= 0:   # the turn end's partial block, copy on write into the sequence's own block
            mc.kv_pool[int(plan.copy_dst)] = mc.kv_pool[int(plan.copy_src)]
        cache = copy.deepcopy(mc.empty_cache)
        nblocks = -(-u // mc.block_size)
        for j, layer in enumerate(mc.attention):
            ks = [mc.kv_pool[b][j][0] for b in seq.table[:nblocks]]
            vs = [mc.kv_pool[b][j][1] for b in seq.table[:nblocks]]
            k, v = mx.concatenate(ks, axis=2)[..., :u, :], mx.concatenate(vs, axis=2)[..., :u, :]
            c = cache_at(cache, layer)
            c.keys, c.values, c.offset = mx.contiguous(k), mx.contiguous(v), u
        if plan.restore_slot >= 0:
            for j, layer in enumerate(mc.recurrent):
                cache_at(cache, layer).cache = list(mc.slots[int(plan.restore_slot)][j])
        mx.eval([c.state for _, c in cache_leaves(cache)])
        seq.restore_s = time.perf_counter() - tic
        with self._lock:
            self.figures["restores"] += 1
            self.figures["restore_copy_s"] += seq.restore_s
        return cache, tokens[u:]

    def insert_cache(self, model_key: tuple, tokens: list[int], prompt_cache: list[Any], *,
                     cache_type: str = "assistant") -> None:
        """A segment end (capture) or a request's end (turn end); the state in `prompt_cache` has folded in
        `tokens`."""
        n = len(tokens)
        capture = self._find(model_key, lambda s: s.fetched and n in s.captures and s.tokens[:n] == list(tokens))
        found = capture or self._find(model_key, lambda s: s.fetched and n >= len(s.tokens) and
                                      list(tokens[:len(s.tokens)]) == s.tokens)
        if found is None:
            return
        try:
            if capture is not None:
                self._capture(*found, n, prompt_cache)
            else:
                self._finish(*found, list(tokens), prompt_cache)
        except Exception:
            logger.exception("reprise.mlx: %s failed; the request is no longer tracked by Reprise",
                             "capture" if capture is not None else "finish")
            self._abandon(*found)

    def take_fetched(self) -> _Sequence | None:
        """The sequence of the last fetch_nearest_cache call (None when it tracked none), once: the server inserts the
        request into its batch right after that call, and the batch generator keeps it under the request's id
        (reprise.mlx.server.RepriseBatchGenerator) to tell :meth:`abandon` which sequence a dropped request had."""
        seq, self._last_fetched = self._last_fetched, None
        return seq

    def abandon(self, seq: _Sequence, tokens: list[int] | None = None, prompt_cache: list[Any] | None = None) -> None:
        """The server dropped the request of `seq` from its batch before its end (its client went away); mlx-lm calls
        no prompt cache method for it. When the request's state at that point (`prompt_cache`, after `tokens`) has
        folded in the whole prompt, the request ends there as at a turn end: the prompt's KV and that state are
        cached. Otherwise (still in its prefill) its sequence is released, its blocks and planned slots freed. A
        sequence already finished or released is left alone."""
        for key, live in self._seqs:
            if live is seq:
                mc = self._models[(key[0], key[2] if len(key) > 2 else None)]
                break
        else:
            return
        with self._lock:
            self.figures["abandoned"] += 1
        folded = cache_at(prompt_cache, mc.attention[0]).offset if prompt_cache and mc.attention else 0
        logger.info("reprise.mlx: a request of %d prompt tokens was abandoned by its client after %d tokens",
                    len(seq.tokens), folded)
        if tokens is not None and len(seq.tokens) <= folded <= len(tokens) and \
                list(tokens[:len(seq.tokens)]) == seq.tokens:
            try:
                self._finish(mc, seq, list(tokens[:folded]), prompt_cache)
            except Exception:
                logger.exception("reprise.mlx: caching an abandoned request failed; its sequence is released")
                self._abandon(mc, seq)
            return
        self._seqs = [(k, s) for k, s in self._seqs if s is not seq]
        try:
            mc.cache.release(seq.seq_id)
        except reprise.Error:
            logger.exception("reprise.mlx: releasing an abandoned request's sequence failed")
        mc.step_done()
        if self.options["check_invariants"]:
            mc.cache.check_invariants()
        with self._lock:
            self.figures["finished"] += 1
            self._record(mc)

    def trim_to(self, *, n_sequences: int | None = None, n_bytes: int | None = None) -> None:
        """Reprise's own budgets bound its pools (--reprise-kv-budget, --reprise-snapshot-budget); the server's
        --prompt-cache-bytes is refused at start, so there is nothing to trim here."""

    @property
    def nbytes(self) -> int:
        total = 0
        for mc in self._models.values():
            total += sum(a.nbytes for layers in mc.kv_pool.values() for kv in layers for a in kv)
            total += sum(a.nbytes for layers in mc.slots.values() for arrays in layers for a in arrays
                         if a is not None)
        return total

    def __len__(self) -> int:
        return sum(m.cache.metrics()["snapshots_held"] + m.cache.metrics()["blocks_cached"]
                   for m in self._models.values())

    def stats_by_type(self) -> dict[str, dict[str, int]]:
        out = {}
        for mc in self._models.values():
            m = mc.cache.metrics()
            out["kv_blocks"] = {"n_sequences": m["blocks_cached"], "n_bytes": m["blocks_cached"] *
                                mc.config.bytes_per_kv_block}
            out["snapshots"] = {"n_sequences": m["snapshots_held"], "n_bytes": m["snapshots_held"] *
                                mc.config.bytes_per_snapshot}
        return out

    def metrics(self) -> dict[str, Any]:
        """The figures, and each model's PrefixCache metrics as of its last finished request. Safe from any thread:
        the PrefixCache itself is only ever called on the generation thread."""
        with self._lock:
            out = dict(self.figures)
            out["last_request"] = dict(self.last_request)
            out["models"] = {k: dict(v) for k, v in self._model_metrics.items()}
        return out

    # ------------------------------------------------------------------------------------------------------------

    def _model(self, model: Any, model_key: tuple) -> _ModelCache:
        base = (model_key[0], model_key[2] if len(model_key) > 2 else None)
        mc = self._models.get(base)
        if mc is None:
            mc = _ModelCache(model, model_key[0], self.options)
            mc.path = model_key[0]
            self._models[base] = mc
            logger.info("reprise.mlx: %s: policy %s, %d attention + %d recurrent layers, block %d, alignment %d, "
                        "%d KV blocks, %d snapshot slots of %d bytes", model_key[0], mc.policy, len(mc.attention),
                        len(mc.recurrent), mc.block_size, mc.cache.alignment, mc.cache.kv_blocks,
                        mc.cache.snapshot_slots, mc.config.bytes_per_snapshot)
        return mc

    def _keys(self, model_key: tuple) -> Any:
        path = str(model_key[0])
        rev = self.options["model_revision"] or self._revisions.get(path)
        if rev is None:
            rev = self._revisions[path] = model_revision(path)
        adapter = model_key[1] if len(model_key) > 1 and model_key[1] else None
        # ExtraKeys takes 64-bit ids: the names' digests (no adapter: lora_id 0, the base model's own keys).
        return reprise.ExtraKeys(model_revision=_id64(rev), lora_id=_id64(str(adapter)) if adapter else 0)

    def _find(self, model_key: tuple, match) -> tuple[_ModelCache, _Sequence] | None:
        base = (model_key[0], model_key[2] if len(model_key) > 2 else None)
        mc = self._models.get(base)
        if mc is None:
            return None
        for key, seq in self._seqs:
            if key == model_key and match(seq):
                return mc, seq
        return None

    def _record(self, mc: _ModelCache) -> None:
        """A copy of the model's metrics for /reprise/metrics (under self._lock, on the generation thread)."""
        self._model_metrics[str(mc.path)] = {**mc.cache.metrics(), "policy": mc.policy, "block_size": mc.block_size,
                                             "alignment": mc.cache.alignment,
                                             "live_sequences_tracked": len(self._seqs)}

    def _abandon(self, mc: _ModelCache, seq: _Sequence) -> None:
        self._seqs = [(k, s) for k, s in self._seqs if s is not seq]
        try:
            mc.cache.release(seq.seq_id)
        except reprise.Error:
            pass   # finished or released inside the failed call already
        mc.step_done()
        with self._lock:
            self.figures["untracked"] += 1
            self.figures["finished"] += 1

    def _save_kv(self, mc: _ModelCache, seq: _Sequence, prompt_cache: list[Any], end: int) -> None:
        """The KV of positions [seq.saved, end) into the sequence's own blocks (shared blocks are never written)."""
        B = mc.block_size
        if end <= seq.saved or not mc.attention:
            seq.saved = max(seq.saved, end)
            return
        layers = [cache_at(prompt_cache, path) for path in mc.attention]
        for b in range(seq.saved // B, -(-end // B)):
            lo, hi = b * B, min((b + 1) * B, end)
            mc.kv_pool[seq.table[b]] = [(mx.contiguous(c.keys[..., lo:hi, :]), mx.contiguous(c.values[..., lo:hi, :]))
                                        for c in layers]
        mx.eval([kv for b in range(seq.saved // B, -(-end // B)) for kv in mc.kv_pool[seq.table[b]]])
        seq.saved = end

    def _write_slot(self, mc: _ModelCache, slot: int, prompt_cache: list[Any]) -> float:
        tic = time.perf_counter()
        arrays = [[mx.contiguous(a) if a is not None else None for a in cache_at(prompt_cache, path).cache]
                  for path in mc.recurrent]
        mx.eval([a for layer in arrays for a in layer if a is not None])
        mc.slots[slot] = arrays
        return time.perf_counter() - tic

    def _capture(self, mc: _ModelCache, seq: _Sequence, n: int, prompt_cache: list[Any]) -> None:
        self._save_kv(mc, seq, prompt_cache, n)
        slot = seq.captures.pop(n)
        dt = self._write_slot(mc, slot, prompt_cache)
        mc.cache.commit(seq.seq_id, n, np.asarray([n], dtype=np.int64))
        seq.committed = n
        for p in [p for p in seq.captures if p < n]:   # passed without a segment ending there: never written
            del seq.captures[p]
        mc.step_done()
        with self._lock:
            self.figures["captures"] += 1
            self.figures["capture_copy_s"] += dt

    def _finish(self, mc: _ModelCache, seq: _Sequence, tokens: list[int], prompt_cache: list[Any]) -> None:
        self._seqs = [(k, s) for k, s in self._seqs if s is not seq]
        folded = cache_at(prompt_cache, mc.attention[0]).offset if mc.attention else len(tokens)
        if folded != len(tokens):
            # The state is not the one after `tokens`: caching it would hand a later prompt another position's state.
            logger.warning("reprise.mlx: request end with %d tokens but a state after %d: not cached", len(tokens),
                           folded)
            mc.cache.release(seq.seq_id)
            mc.step_done()
            with self._lock:
                self.figures["finished"] += 1
                self.figures["untracked"] += 1
            return
        try:
            if len(tokens) > len(seq.tokens):
                ext = mc.cache.extend(seq.seq_id, np.asarray(tokens[len(seq.tokens):], dtype=np.int32))
                seq.table.extend(ext.new_blocks.tolist())
            self._save_kv(mc, seq, prompt_cache, len(tokens))
            mc.cache.commit(seq.seq_id, len(tokens))
        except (reprise.PoolExhausted, reprise.OutOfRange) as e:
            logger.warning("reprise.mlx: reply past Reprise's budgets, not cached (%s)", e)
            mc.cache.release(seq.seq_id)
            mc.step_done()
            with self._lock:
                self.figures["finished"] += 1
            return
        done = mc.cache.finish(seq.seq_id)
        captured = done.capture_slot >= 0
        if captured:
            # The live state after the last token fed: the turn end (every token of `tokens` is in the state).
            self._write_slot(mc, int(done.capture_slot), prompt_cache)
        mc.step_done()
        plan = seq.plan
        record = {"prompt_tokens": len(seq.tokens), "skipped_tokens": int(plan.usable_tokens),
                  "kv_matched_tokens": int(plan.kv_matched_tokens), "restored": plan.restore_slot >= 0,
                  "restore_exactness": plan.restore_exactness if plan.usable_tokens else None,
                  "splits": seq.splits, "turn_end": int(done.capture_position) if captured else None,
                  "restore_copy_ms": round(seq.restore_s * 1e3, 3)}
        if self.options["check_invariants"]:
            mc.cache.check_invariants()
        with self._lock:
            self.figures["turn_end_captures"] += int(captured)
            self.figures["finished"] += 1
            self.last_request = record
            self._record(mc)
        logger.info("reprise.mlx: prompt %d tokens, skipped %d (KV matched %d, %s), prefill stops %s, turn end %s, "
                    "restore copy %.2f ms", record["prompt_tokens"], record["skipped_tokens"],
                    record["kv_matched_tokens"], "snapshot restored" if record["restored"] else "no snapshot",
                    seq.splits, record["turn_end"], record["restore_copy_ms"])
