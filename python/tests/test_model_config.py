# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""ModelConfig from Hugging Face config.json dicts: every supported family, byte figures against the C++
presets, and clear errors for what Reprise does not support. The dicts below use the public field names and
values of the checkpoints' config.json files (fields that do not affect state sizes are left out)."""

import pytest

import reprise

NEMOTRON_H_8B = {  # nvidia/Nemotron-H-8B-Base-8K
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "attention_head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "chunk_size": 128,
    "expand": 2,
    "torch_dtype": "bfloat16",
}

QWEN3_NEXT_80B_A3B = {  # Qwen/Qwen3-Next-80B-A3B-Instruct
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "torch_dtype": "bfloat16",
}

QWEN3_5_27B = {  # Qwen/Qwen3.5-27B: the language model's fields nested in text_config, explicit layer_types
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
        "full_attention_interval": 4,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
    },
}

FALCON_H1_7B = {  # tiiuae/Falcon-H1-7B-Base
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "hidden_size": 3072,
    "num_hidden_layers": 44,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_d_ssm": 3072,
    "mamba_n_heads": 24,
    "mamba_d_head": 128,
    "mamba_d_state": 256,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_chunk_size": 128,
    "mamba_expand": 2,
    "torch_dtype": "bfloat16",
}

GRANITE_4_H_SMALL = {  # ibm-granite/granite-4.0-h-small
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "hidden_size": 4096,
    "num_hidden_layers": 40,
    "layer_types": ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)],
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_chunk_size": 256,
    "mamba_expand": 2,
    "num_local_experts": 72,
    "num_experts_per_tok": 10,
    "position_embedding_type": "nope",
}

BAMBA_9B = {  # ibm-ai-platform/Bamba-9B
    "architectures": ["BambaForCausalLM"],
    "model_type": "bamba",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "attn_layer_indices": [9, 18, 27],
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_chunk_size": 256,
    "mamba_expand": 2,
}

LLAMA_3_8B = {  # meta-llama/Meta-Llama-3-8B
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
}

JAMBA = {  # ai21labs/Jamba-v0.1
    "architectures": ["JambaForCausalLM"],
    "model_type": "jamba",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "attn_layer_offset": 4,
    "attn_layer_period": 8,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
}

MiB = 1 << 20


def test_nemotron_h_8b_matches_the_preset():
    c = reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B)
    preset = reprise.ModelConfig.preset("nemotron_h_8b")
    assert (c.attention_layers, c.mamba2_layers, c.gated_delta_layers) == (4, 24, 0)
    assert c.bytes_per_snapshot == preset.bytes_per_snapshot == 102137856  # 97.4 MiB
    assert round(c.bytes_per_snapshot / MiB, 1) == 97.4
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block == 4 * 2 * 8 * 128 * 2 * 16
    # The checkpoint's chunk_size (128) sets the alignment; the preset uses the 256-token chunk.
    assert c.alignment == 128 and preset.alignment == 256


def test_nemotron_h_layers_block_type_spelling():
    kinds = {"M": "mamba", "*": "attention", "-": "mlp"}
    spelled = {k: v for k, v in NEMOTRON_H_8B.items() if k != "hybrid_override_pattern"}
    spelled["layers_block_type"] = [kinds[c] for c in NEMOTRON_H_8B["hybrid_override_pattern"]]
    c = reprise.ModelConfig.from_hf_config(spelled)
    assert (c.attention_layers, c.mamba2_layers) == (4, 24) and c.bytes_per_snapshot == 102137856


def test_qwen3_next_80b_matches_the_preset():
    c = reprise.ModelConfig.from_hf_config(QWEN3_NEXT_80B_A3B)
    preset = reprise.ModelConfig.preset("qwen3_next_80b")
    assert (c.attention_layers, c.gated_delta_layers) == (12, 36)
    assert c.bytes_per_snapshot == preset.bytes_per_snapshot == 77266944  # 73.7 MiB
    assert round(c.bytes_per_snapshot / MiB, 1) == 73.7
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block
    assert c.alignment == preset.alignment == 64


def test_qwen3_5_reads_text_config_and_layer_types():
    c = reprise.ModelConfig.from_hf_config(QWEN3_5_27B)
    assert (c.attention_layers, c.gated_delta_layers) == (16, 48)
    delta = next(shape for shape, _ in c.groups if isinstance(shape, reprise.GatedDeltaShape))
    assert (delta.key_heads, delta.value_heads, delta.key_dim, delta.value_dim) == (16, 48, 128, 128)
    assert c.bytes_per_snapshot == 48 * (3 * (2 * 16 * 128 + 48 * 128) * 2 + 48 * 128 * 128 * 4)


def test_falcon_h1_7b_matches_the_preset():
    c = reprise.ModelConfig.from_hf_config(FALCON_H1_7B)
    preset = reprise.ModelConfig.preset("falcon_h1_7b")
    assert (c.attention_layers, c.mamba2_layers) == (44, 44)  # attention and Mamba2 side by side
    assert c.bytes_per_snapshot == preset.bytes_per_snapshot == 139358208  # 132.9 MiB
    assert round(c.bytes_per_snapshot / MiB, 1) == 132.9
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block
    assert c.alignment == preset.alignment == 128


def test_granite_4_h_small():
    c = reprise.ModelConfig.from_hf_config(GRANITE_4_H_SMALL)
    assert (c.attention_layers, c.mamba2_layers) == (4, 36)
    mamba = next(shape for shape, _ in c.groups if isinstance(shape, reprise.Mamba2Shape))
    assert (mamba.heads, mamba.head_dim, mamba.state_dim, mamba.groups, mamba.chunk) == (128, 64, 128, 1, 256)
    assert c.bytes_per_snapshot == 36 * (3 * (128 * 64 + 2 * 128) * 2 + 128 * 64 * 128 * 4)
    assert c.bytes_per_kv_block == 4 * 2 * 8 * (4096 // 32) * 2 * 16


def test_granite_head_dim_auto_is_derived():
    c = reprise.ModelConfig.from_hf_config({**GRANITE_4_H_SMALL, "mamba_d_head": "auto"})
    assert c.bytes_per_snapshot == reprise.ModelConfig.from_hf_config(GRANITE_4_H_SMALL).bytes_per_snapshot


def test_bamba_9b():
    c = reprise.ModelConfig.from_hf_config(BAMBA_9B)
    assert (c.attention_layers, c.mamba2_layers) == (3, 29)
    assert c.bytes_per_snapshot == 29 * (3 * (128 * 64 + 2 * 128) * 2 + 128 * 64 * 128 * 4)


def test_llama_is_attention_only():
    c = reprise.ModelConfig.from_hf_config(LLAMA_3_8B)
    preset = reprise.ModelConfig.preset("llama3_8b")
    assert not c.has_recurrent and c.attention_layers == 32
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block == 32 * 2 * 8 * 128 * 2 * 16
    assert c.bytes_per_snapshot == 0


@pytest.mark.parametrize("block_size", [8, 16, 32, 64, 128, 256])
def test_block_sizes_reach_the_cache(block_size):
    c = reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B, block_size=block_size)
    assert c.block_size == block_size and c.alignment == max(block_size, 128)
    cache = reprise.PrefixCache(c, "memory_only", kv_blocks=16)
    assert cache.block_size == block_size


def test_an_unsupported_block_size_is_refused_by_the_cache():
    c = reprise.ModelConfig.from_hf_config(LLAMA_3_8B, block_size=48)
    with pytest.raises(reprise.UnsupportedConfig):
        reprise.PrefixCache(c, "block_sharing", kv_blocks=16)


def test_block_size_that_does_not_divide_the_chunk_is_misaligned():
    with pytest.raises(reprise.Misaligned):
        reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B, block_size=48)


def test_jamba_names_mamba1():
    with pytest.raises(ValueError, match="Mamba-1"):
        reprise.ModelConfig.from_hf_config(JAMBA)


def test_unknown_architecture_is_named():
    with pytest.raises(ValueError, match="RwkvForCausalLM"):
        reprise.ModelConfig.from_hf_config({"architectures": ["RwkvForCausalLM"]})
    with pytest.raises(ValueError, match="architectures"):
        reprise.ModelConfig.from_hf_config({"model_type": "llama"})


def test_missing_field_is_named():
    broken = {k: v for k, v in NEMOTRON_H_8B.items() if k != "ssm_state_size"}
    with pytest.raises(ValueError, match="ssm_state_size"):
        reprise.ModelConfig.from_hf_config(broken)


def test_unknown_layer_kind_is_named():
    with pytest.raises(ValueError, match="sliding_attention"):
        reprise.ModelConfig.from_hf_config({**QWEN3_NEXT_80B_A3B, "layer_types": ["sliding_attention"] * 48})
    with pytest.raises(ValueError, match="'X'"):
        reprise.ModelConfig.from_hf_config({**NEMOTRON_H_8B, "hybrid_override_pattern": "M*X"})


def test_unsupported_shape_is_an_errc():
    with pytest.raises(reprise.UnsupportedConfig):
        reprise.ModelConfig.from_hf_config({**FALCON_H1_7B, "mamba_chunk_size": 100})


def test_shapes_by_hand():
    c = reprise.ModelConfig([(reprise.KvShape(kv_heads=8, head_dim=128), 4),
                             (reprise.Mamba2Shape(heads=128, head_dim=64, state_dim=128, groups=8), 24)])
    assert c.bytes_per_snapshot == 102137856 and c.alignment == 256
    with pytest.raises(reprise.InvalidArgument):
        reprise.ModelConfig([])
    with pytest.raises(TypeError):
        reprise.ModelConfig([("attention", 4)])
    with pytest.raises(ValueError, match="dtype"):
        reprise.KvShape(kv_heads=8, head_dim=128, dtype="int8")
