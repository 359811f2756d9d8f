# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Reprise inside mlx-lm's server (docs/mlx-lm.md).

- :class:`reprise.mlx.prompt_cache.PromptCache` takes the place of mlx-lm's ``LRUPromptCache``: the server calls it
  through the same methods (``fetch_nearest_cache``, ``insert_cache``, ``trim_to``, ``nbytes``), and it keeps KV
  blocks and recurrent-state snapshots where Reprise plans them.
- ``python -m reprise.mlx.server --reprise chat --model DIR ...`` starts mlx-lm's server with it.

Importing this package needs mlx-lm (scripts/fetch-mlx.sh makes the pinned environment)."""

MLX_LM_VERSION = "0.32.2"   # the version the integration is tested against; others are refused at start
