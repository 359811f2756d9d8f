# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Random-weight checkpoints for the mlx-lm tests, written at test time: a Hugging Face style config.json (mlx-lm and
Reprise's ModelConfig.from_hf_config read the same file), weights from mlx-lm's own model classes saved with
mx.save_safetensors, and a small character-level BPE tokenizer with a ChatML chat template.

The tokenizer has no merges: every token is one character, so a reply decoded to text and sent back in the next
turn's messages tokenizes to the same ids. That is what lets a continued conversation meet its own turn end (with
merges, a random model's reply re-tokenizes differently and the next prompt leaves the cached path early)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Printable characters of the tokenizer: letters, digits, punctuation, space and newline.
ALPHABET = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] + \
    list("0123456789 .,;:!?'-()\n")
# Exactly the tokenizer's ids: a random model then never samples an id that decodes to nothing.
VOCAB = len(SPECIALS) + len(ALPHABET)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Tiny shapes (hidden 64, 3-4 layers) so a 2-core machine runs each request in well under a second.
CONFIGS = {
    # Nemotron-H: Mamba2 + attention + MLP blocks ("M*M-"); the Mamba2 chunk of mlx-lm's CPU path is 256 tokens.
    "nemotron_h": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": VOCAB,
        "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 4096, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "attention_bias": False, "mamba_num_heads": 4,
        "mamba_head_dim": 16, "mamba_proj_bias": False, "ssm_state_size": 16, "conv_kernel": 4, "n_groups": 1,
        "chunk_size": 128, "mlp_bias": False, "layer_norm_epsilon": 1e-5, "use_bias": False, "use_conv_bias": True,
        "hybrid_override_pattern": "M*M-", "num_hidden_layers": 4, "residual_in_fp32": False,
        "tie_word_embeddings": False, "torch_dtype": "float32", "eos_token_id": 2,
    },
    # Qwen3-Next: gated delta x3 + one full-attention layer, sparse MoE MLPs.
    "qwen3_next": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": VOCAB,
        "hidden_size": 64, "num_hidden_layers": 4, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 4,
        "num_experts_per_tok": 2, "decoder_sparse_step": 1, "shared_expert_intermediate_size": 64,
        "mlp_only_layers": [], "moe_intermediate_size": 32, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25, "max_position_embeddings": 4096, "full_attention_interval": 4,
        "norm_topk_prob": True, "tie_word_embeddings": False, "torch_dtype": "float32", "eos_token_id": 2,
    },
    # Granite-4.0-H: Mamba2 and attention layers ("layer_types"), each followed by a MoE plus a shared MLP. Attention
    # with RoPE (the released checkpoints use none) so that a restored KV cache at a wrong offset shows in the logits.
    "granitemoehybrid": {
        "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "vocab_size": VOCAB,
        "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 4, "max_position_embeddings": 4096,
        "num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": False, "embedding_multiplier": 1.0,
        "attention_multiplier": 0.25, "logits_scaling": 1.0, "residual_multiplier": 1.0,
        "layer_types": ["mamba", "attention", "mamba", "mamba"], "rms_norm_eps": 1e-5, "num_local_experts": 4,
        "num_experts_per_tok": 2, "shared_intermediate_size": 64, "mamba_n_heads": 8, "mamba_d_head": 16,
        "mamba_expand": 2, "mamba_proj_bias": False, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_n_groups": 1,
        "mamba_conv_bias": True, "mamba_chunk_size": 256, "position_embedding_type": "rope", "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "eos_token_id": 2,
    },
    # Falcon-H1: every layer runs Mamba2 and attention side by side on the same input (mlx-lm: one CacheList of an
    # ArraysCache and a KVCache per layer).
    "falcon_h1": {
        "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "vocab_size": VOCAB, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "attention_bias": False, "mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16,
        "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
        "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False, "max_position_embeddings": 4096,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float32",
        "eos_token_id": 2,
    },
    # Qwen3.5 (dense): gated delta x3 + one full-attention layer, the language model's fields in text_config.
    "qwen3_5": {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": False,
        "torch_dtype": "float32", "eos_token_id": 2,
        "text_config": {
            "model_type": "qwen3_5_text", "vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 4,
            "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": False,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                "mrope_section": [1, 1, 0]},
        },
    },
    # Qwen3.5 MoE: the same layers with sparse MoE MLPs and a shared expert.
    "qwen3_5_moe": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False, "torch_dtype": "float32", "eos_token_id": 2,
        "text_config": {
            "model_type": "qwen3_5_moe_text", "vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "linear_num_value_heads": 4,
            "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "norm_topk_prob": True,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": False,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                "mrope_section": [1, 1, 0]},
        },
    },
    # Attention only (Llama): Reprise's block_sharing policy.
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 64,
        "num_hidden_layers": 3, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "torch_dtype": "float32", "eos_token_id": 2,
    },
}


# transformers loads a Qwen3.5 checkpoint's tokenizer as its own Qwen3_5Tokenizer (byte-level pre-tokenizer and
# decoder) whatever tokenizer_config.json names: its vocabulary must spell space and newline as byte-level does
# ('Ġ', 'Ċ'), or they are dropped from every prompt.
BYTE_LEVEL_TOKENIZER = {"qwen3_5", "qwen3_5_moe"}


def write_tokenizer(directory: Path, byte_level: bool = False) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = [{" ": "\u0120", "\n": "\u010a"}.get(c, c) for c in ALPHABET] if byte_level else ALPHABET
    vocab = {t: i for i, t in enumerate(SPECIALS + alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "bos_token": None,
        "pad_token": "<|endoftext|>", "unk_token": None, "chat_template": CHAT_TEMPLATE,
        "model_max_length": 4096, "clean_up_tokenization_spaces": False}))


# Larger shapes for the side by side (bench/mlx_lm_side_by_side.py): prefill costs more than the HTTP round trip.
BENCH_SHAPES = {
    "nemotron_h": {"hidden_size": 256, "intermediate_size": 512, "mamba_num_heads": 8, "mamba_head_dim": 32,
                   "ssm_state_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                   "hybrid_override_pattern": "M*M-M*M-", "num_hidden_layers": 8},
    "qwen3_next": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
                   "num_key_value_heads": 2, "head_dim": 32, "linear_num_value_heads": 8,
                   "linear_num_key_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32},
}


#: Layer sizes of real models, fewer layers (the side by side at a realistic shape): Qwen3.5-0.8B's (hidden 1024,
#: gated delta 16 + 16 heads of 128, attention 8 heads of 256 over 2 KV heads, dense MLPs of 3584), 4 layers (3 gated
#: delta, 1 attention, as the model's 3:1 interleave).
REAL_SHAPES = {
    "qwen3_next": {"hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 4, "num_attention_heads": 8,
                   "num_key_value_heads": 2, "head_dim": 256, "linear_num_value_heads": 16,
                   "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                   "mlp_only_layers": [0, 1, 2, 3]},
}


def write_checkpoint(directory: Path, arch: str, seed: int = 0, shape: dict | None = None) -> Path:
    """A random-weight checkpoint of `arch` (a key of CONFIGS, its fields overridden by `shape`) in `directory`;
    returns it."""
    module = importlib.import_module(f"mlx_lm.models.{CONFIGS[arch]['model_type']}")

    directory.mkdir(parents=True, exist_ok=True)
    config = {**CONFIGS[arch], **(shape or {})}
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    # Wider than the default init so that layers matter to the logits (and so a wrong state shows in them).
    params = {k: v * 2.0 if v.ndim >= 2 else v for k, v in tree_flatten(model.parameters())}
    mx.eval(params)
    mx.save_safetensors(str(directory / "model.safetensors"), params)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    write_tokenizer(directory, byte_level=config["model_type"] in BYTE_LEVEL_TOKENIZER)
    return directory
