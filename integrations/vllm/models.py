# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Random-weight hybrid checkpoints written at test time from transformers' own config classes, small enough that
vLLM loads them in seconds on a CPU: a Mamba2 hybrid (GraniteMoeHybrid, fp32) and a gated-delta hybrid (Qwen3-Next,
bf16, with an MoE layer: vLLM's CPU gated-delta path needs bf16 and its Qwen3-Next needs one)."""

from __future__ import annotations

import os

VOCAB = 1024


def _write(path: str, seed: int, make) -> str:
    """Writes the model `make()` builds, its weights drawn from `seed`, to `path` (kept if already written)."""
    import torch

    if not os.path.exists(os.path.join(path, "config.json")):
        torch.manual_seed(seed)
        make().save_pretrained(path)
    return path


def write_granite_hybrid(path: str, seed: int = 0) -> str:
    """GraniteMoeHybrid: hidden 256, 6 layers (Mamba2 x2, attention, Mamba2 x2, attention), vocab 1024, fp32.
    Mamba2: 8 heads of 64, state 64, one group, conv width 4, chunk 64."""
    import torch
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    return _write(path, seed, lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, num_local_experts=4, num_experts_per_tok=2,
        shared_intermediate_size=256,
        layer_types=["mamba", "mamba", "attention", "mamba", "mamba", "attention"],
        mamba_n_heads=8, mamba_n_groups=1, mamba_d_state=64, mamba_d_head=64, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=64, position_embedding_type="rope", bos_token_id=1, eos_token_id=2, pad_token_id=0,
        dtype="float32")).to(torch.float32))


def write_qwen3_next(path: str, seed: int = 0) -> str:
    """Qwen3-Next: hidden 256, 4 layers (gated delta x3, attention), the last an MoE layer, vocab 1024, bf16."""
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    return _write(path, seed, lambda: Qwen3NextForCausalLM(Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, linear_conv_kernel_dim=4,
        linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
        decoder_sparse_step=4, moe_intermediate_size=128, shared_expert_intermediate_size=128, num_experts_per_tok=2,
        num_experts=4, mlp_only_layers=[0, 1, 2],
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="bfloat16")).to(torch.bfloat16))
