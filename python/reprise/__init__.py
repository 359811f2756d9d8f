# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Reprise: prefix caching for hybrid attention / recurrent LLMs.

The package is a thin layer over the C++ library (the compiled module ``reprise._reprise``):

- :class:`ModelConfig` describes a model's stateful layers, from layer shapes, a preset or a Hugging Face
  ``config.json`` (:meth:`ModelConfig.from_hf_config`).
- :class:`PrefixCache` is the runtime prefix cache with one of the policies in :data:`POLICIES`; its plans
  carry numpy ``int32`` block tables and ``int64`` capture lists. With host budgets it has a host tier: what
  the GPU pools evict goes to host pools the engine owns, and :meth:`PrefixCache.take_transfers` returns the
  moves (:class:`Transfers`) to run.
- With a ``remote_fleet_seed`` it has a remote tier below the host tier, a store the fleet shares:
  :meth:`PrefixCache.take_transfers` lists :class:`RemotePut` values for it, and :meth:`PrefixCache.probe`,
  :meth:`PrefixCache.prefetch` (a :class:`FetchPlan` of :class:`RemoteFetch`) and :meth:`PrefixCache.fetched` bring
  values back. With ``remote_turn_ends=True`` a conversation's turn end is a ``'turn_end'`` value (its partial
  block, ``kv_units``, where :data:`NO_UNIT` marks none at a block boundary, and its snapshot) linked to
  ``'block'`` values of the blocks decoded before it, each put once.
- :class:`StateRouter` routes a fleet's requests by state (docs/routing.md): caches built with
  ``state_events=FleetKeys(...)`` report what they hold (:meth:`PrefixCache.take_state_events`, a list of
  :class:`StateEvent`), the router indexes those reports per engine (:meth:`StateRouter.apply`) and sends a prompt
  to the engine that would skip the most prefill under a load cap (:meth:`StateRouter.route`, a
  :class:`RouteChoice`).
- :mod:`reprise.ops` holds the host implementations of the state kernels (state copy, transfers between pool
  sets, causal conv1d, Mamba2 SSD, gated delta rule) on numpy arrays: float32, or bfloat16 (uint16 bits,
  ``dtype='bfloat16'``) activations; float32, or bfloat16 / float16 state pools where the kernel takes them.

Every ``reprise::errc`` is an exception class derived from :class:`Error` (``PoolExhausted``,
``UnknownSequence``, ...); :data:`ERRORS` maps errc names to them. A call that raises has changed nothing.
"""

from ._reprise import *  # noqa: F401,F403  (the compiled classes, exceptions and constants)
from ._reprise import (  # noqa: F401  (named explicitly for readers and linters)
    ERRORS,
    HAS_OPS,
    NO_UNIT,
    POLICIES,
    AdmitPlan,
    Error,
    ExtendPlan,
    ExtraKeys,
    FetchPlan,
    FinishPlan,
    FleetKeys,
    ForkPlan,
    GatedDeltaShape,
    KvShape,
    Mamba2Shape,
    ModelConfig,
    PrefixCache,
    RemoteFetch,
    RemotePut,
    RouteChoice,
    StateEvent,
    StateRouter,
    Transfers,
    __version__,
)

if HAS_OPS:
    from ._reprise import ops  # noqa: F401
