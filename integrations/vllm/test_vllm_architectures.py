# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.vllm on every hybrid architecture vLLM 0.32's CPU build registers beyond the two of
test_vllm_connector.py: Nemotron-H, Falcon-H1, pure Mamba2, Qwen3.5 dense and MoE, and Granite-4.0-H with its
published Mamba2 chunk of 256 (random-weight checkpoints from models.py, greedy from token ids, in-process).

Opt-in (REPRISE_VLLM_ARCHS=1): three engines per architecture, too slow for CI. For each architecture:

- 'strict' equals caching off bit for bit (token ids and log-probabilities), both with chunked prefill of CHUNK
  tokens (vLLM's CPU attention is not split-invariant: test_vllm_connector.py), on conversations over two system
  prompts of unaligned lengths with replies of 1 to 12 tokens, with prefill skipped;
- 'chat': every continued turn computes only its new tokens and one more; agreement with caching off (first turns
  bit for bit, continued turns greedy and in log-probabilities) is printed, not asserted (docs/vllm.md).

A Mamba-1 architecture (Jamba) is refused at start, naming the layer kind; 'strict' and 'chat' serve four
requests at a time and leave the cache consistent.
"""

from __future__ import annotations

import gc
import os
import time

import pytest

import harness
import models

pytestmark = pytest.mark.skipif(os.environ.get("REPRISE_VLLM_ARCHS") != "1",
                                reason="slow (three vLLM engines per architecture): set REPRISE_VLLM_ARCHS=1")

#: Checkpoint writers by architecture.
ARCHS = {
    "nemotron_h": models.write_nemotron_h,
    "falcon_h1": models.write_falcon_h1,
    "mamba2": models.write_mamba2,
    "qwen3_5": models.write_qwen3_5,
    "qwen3_5_moe": models.write_qwen3_5_moe,
    "granite_chunk256": models.write_granite_hybrid_chunk256,
}

#: vLLM's chunked prefill, as CHUNK in test_vllm_connector.py.
CHUNK = 64
CHUNKED = {"engine_args": {"max_num_batched_tokens": CHUNK}}

#: Six conversations over two system prompts (300 to 700 tokens, unaligned), three turns, replies of 1 to 12 tokens.
CONVS = harness.conversations(n=6, turns=3, system_prompts=2, seed=23, reply_tokens=(1, 12))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            make = ARCHS.get(name) or getattr(models, f"write_{name}")
            made[name] = make(str(tmp_path_factory.mktemp(name)))
        return made[name]

    return get


run, outputs, cached = harness.run, harness.outputs, harness.cached


def agreement(chat, off):
    """Continued turns greedy-equal, of how many, and the largest log-probability difference up to each turn's
    first differing token."""
    same = diff = 0
    pairs = [(x, y) for c, o in zip(chat, off) for x, y in zip(c.turns[1:], o.turns[1:])]
    for x, y in pairs:
        same += x.tokens == y.tokens
        for a, b, ta, tb in zip(x.logprobs, y.logprobs, x.tokens, y.tokens):
            diff = max(diff, abs(a - b))
            if ta != tb:
                break
    return same, len(pairs), diff


@pytest.mark.parametrize("arch", list(ARCHS))
def test_architecture(arch, checkpoints):
    model = checkpoints(arch)
    start = time.perf_counter()
    off = run(model, "off", CONVS, **CHUNKED)[0]
    strict, metrics = run(model, "strict", CONVS, **CHUNKED)
    chat = run(model, "chat", CONVS, **CHUNKED)[0]
    seconds = time.perf_counter() - start

    equal = [a == b for a, b in zip(outputs(strict), outputs(off))]
    ends = [c.turns[t].cached_tokens == c.turns[t - 1].prompt_tokens + len(c.turns[t - 1].tokens) - 1
            for c in chat for t in range(1, len(c.turns))]
    # A conversation's first turn restores at most a shared system prompt's branch point; whether it equals caching
    # off bit for bit depends on where chat's prefill steps end (its restores and captures need not fall on CHUNK
    # multiples): reported, with each first turn's cached tokens.
    firsts = [(c.turns[0].cached_tokens, (c.turns[0].tokens, c.turns[0].logprobs) == (o.turns[0].tokens,
                                                                                       o.turns[0].logprobs))
              for c, o in zip(chat, off)]
    same, pairs, diff = agreement(chat, off)
    print(f"\n{arch}: strict equals caching off bit for bit on {sum(equal)} of {len(equal)} turns, "
          f"{sum(cached(strict))} of {sum(t.prompt_tokens for c in strict for t in c.turns)} prompt tokens cached "
          f"(per turn {cached(strict)}); chat: first turns bitwise {sum(e for _, e in firsts)} of {len(firsts)} "
          f"(cached tokens, bitwise: {firsts}), continued turns computing new tokens + 1 {sum(ends)} of {len(ends)}, "
          f"greedy-equal {same} of {pairs}, largest "
          f"log-probability difference {diff:.3g}; {seconds:.0f} s")
    assert all(equal)
    assert sum(cached(strict)) > 0 and metrics["vllm_skipped_tokens"] == sum(cached(strict))
    assert all(ends), [(c.turns[t].cached_tokens, c.turns[t - 1].prompt_tokens + len(c.turns[t - 1].tokens) - 1)
                       for c in chat for t in range(1, len(c.turns))]


def test_mamba1_is_refused_at_start(checkpoints, monkeypatch):
    """Jamba's Mamba-1 layers: the connector refuses the engine at start, naming the layer kind. vLLM 0.32's CPU
    build fails any Mamba-1 model in its memory-profiling run, before the KV cache (and the connector) exists: the
    Mamba-1 mixer's profile path (no attention metadata) hands out_proj a transposed tensor, which the CPU GEMM
    (onednn_mm) refuses ('a.stride(-1) == 1'). The profile run's outputs are unused, so here that path writes
    nothing and the engine gets as far as the connector."""
    from vllm.forward_context import get_forward_context
    from vllm.model_executor.layers.mamba.mamba_mixer import MambaMixer

    forward_impl = MambaMixer.forward_impl

    def profiled(self, hidden_states, output):
        if get_forward_context().attn_metadata is None:
            return None
        return forward_impl(self, hidden_states, output)

    monkeypatch.setattr(MambaMixer, "forward_impl", profiled)
    with pytest.raises(ValueError, match="MAMBA1 recurrent layers") as e:
        harness.engine(checkpoints("jamba"), "strict")
    print(f"\njamba: {e.value}")
    gc.collect()


@pytest.mark.parametrize("mode", ["strict", "chat"])
@pytest.mark.parametrize("arch", ["nemotron_h", "qwen3_5"])
def test_concurrent_requests(arch, mode, checkpoints):
    """Four requests at a time (chunked prefill beside decodes): every turn served in full, the cache consistent."""
    convs, metrics = run(checkpoints(arch), mode, CONVS, concurrent=4, max_num_seqs=4, **CHUNKED)
    assert all(len(t.tokens) == n for c in convs for t, n in zip(c.turns, c.reply_tokens))
    assert sum(cached(convs)) > 0
    print(f"\n{arch} {mode}, 4 at a time: {sum(cached(convs))} prompt tokens cached (per turn {cached(convs)}); "
          f"{metrics['vllm_skipped_tokens']} skipped")
