# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.mlx.server with every captured snapshot perturbed (each array scaled by 1 + 1e-3) before it is stored:
the tests use it to show that their exact comparisons catch a wrong restore."""

import mlx.core as mx

from reprise.mlx import prompt_cache, server

_write_slot = prompt_cache.PromptCache._write_slot


def _perturbed(self, mc, slot, cache):
    seconds = _write_slot(self, mc, slot, cache)
    mc.slots[slot] = [[a * (1 + 1e-3) if a is not None and mx.issubdtype(a.dtype, mx.floating) else a
                       for a in layer] for layer in mc.slots[slot]]
    return seconds


prompt_cache.PromptCache._write_slot = _perturbed

if __name__ == "__main__":
    server.main()
