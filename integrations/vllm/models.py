# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Random-weight hybrid checkpoints written at test time from transformers' own config classes, small enough that
vLLM loads them in seconds on a CPU: a Mamba2 hybrid (GraniteMoeHybrid, fp32) and a gated-delta hybrid (Qwen3-Next,
bf16, with an MoE layer: vLLM's CPU gated-delta path needs bf16 and its Qwen3-Next needs one) for the tests that run
in CI, and Nemotron-H, Falcon-H1, pure Mamba2, Qwen3.5 dense and MoE, Granite-4.0-H at its published chunk of 256 and
Jamba (refused) for test_vllm_architectures.py."""

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


def write_granite_hybrid(path: str, seed: int = 0, experts: int = 4, max_positions: int = 4096) -> str:
    """GraniteMoeHybrid: hidden 256, 6 layers (Mamba2 x2, attention, Mamba2 x2, attention), vocab 1024, fp32.
    Mamba2: 8 heads of 64, state 64, one group, conv width 4, chunk 64. `experts` 0: a dense MLP (shared only), as
    vLLM's CPU build runs LoRA adapters (its LoRA MoE path is a Triton kernel)."""
    import torch
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    return _write(path, seed, lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_positions, num_local_experts=experts, num_experts_per_tok=2,
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


def write_lora(model: str, path: str, seed: int, rank: int = 8) -> str:
    """A random LoRA adapter (PEFT's layout: adapter_config.json + adapter_model.safetensors) for the attention
    projections of the checkpoint at `model`, strong enough to change its outputs (PEFT starts B at zero: no change)."""
    import json

    import torch
    from safetensors.torch import save_file

    if os.path.exists(os.path.join(path, "adapter_config.json")):
        return path
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head = config.get("head_dim") or hidden // heads
    kv = config["num_key_value_heads"] * head
    shapes = {"q_proj": (hidden, heads * head), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
              "o_proj": (heads * head, hidden)}
    layers = [i for i, kind in enumerate(config["layer_types"]) if kind in ("attention", "full_attention")]
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for i in layers:
        for name, (n_in, n_out) in shapes.items():
            stem = f"base_model.model.model.layers.{i}.self_attn.{name}"
            tensors[f"{stem}.lora_A.weight"] = torch.randn(rank, n_in, generator=g) * 0.2
            tensors[f"{stem}.lora_B.weight"] = torch.randn(n_out, rank, generator=g) * 0.2
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"))
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": rank,
                   "target_modules": list(shapes), "bias": "none", "base_model_name_or_path": model}, f)
    return path


#: Special tokens of the test tokenizer (ids 0-5); words w6 .. w1023 are the other ids.
SPECIALS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]

#: A chat template in the shape real ones have: a role marker before each message, the assistant's marker as the
#: generation prompt.
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def write_tokenizer(path: str) -> str:
    """A word-level tokenizer over the checkpoints' 1024 ids (text 'w17 w400' is ids [17, 400]) with a chat
    template, written next to a checkpoint so that vLLM's OpenAI server serves it with text and chat messages."""
    import json

    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel

    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), VOCAB)})
    tok = Tokenizer(WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "model_max_length": 4096, "chat_template": CHAT_TEMPLATE}, f)
    return path


def words(ids) -> str:
    """The text of word ids (>= 6) for the test tokenizer."""
    return " ".join(f"w{i}" for i in ids)


# ----------------------------------------------------------------------------------------------------------------
# Further hybrid architectures vLLM 0.32's CPU build registers (test_vllm_architectures.py)


def write_nemotron_h(path: str, seed: int = 0) -> str:
    """Nemotron-H: hidden 256, 5 layers (Mamba2, attention, MLP, Mamba2, MLP), vocab 1024, fp32. Mamba2: 8 heads of
    64, state 64, one group, conv width 4, chunk 64. Its MLP layers are the published dense, non-gated relu^2 MLP:
    vLLM's CPU build runs those (a plain up/down projection); what it refuses is Nemotron-H's MoE layers ('moe', as in
    Nemotron 3), whose experts are non-gated (FusedMoE is_act_and_mul=False: CUDA, XPU and ROCm only)."""
    import torch
    from transformers import NemotronHConfig, NemotronHForCausalLM

    return _write(path, seed, lambda: NemotronHForCausalLM(NemotronHConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, max_position_embeddings=4096, layers_block_type=["mamba", "attention", "mlp", "mamba", "mlp"],
        mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=64, n_groups=1, conv_kernel=4, expand=2, chunk_size=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="float32")).to(torch.float32))


def write_falcon_h1(path: str, seed: int = 0) -> str:
    """Falcon-H1: hidden 256, 4 layers, each attention and Mamba2 side by side (4 heads of 64, 2 KV heads; Mamba2 8
    heads of 64, state 64, one group, conv width 4, chunk 64), vocab 1024, fp32."""
    import torch
    from transformers import FalconH1Config, FalconH1ForCausalLM

    return _write(path, seed, lambda: FalconH1ForCausalLM(FalconH1Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, mamba_d_ssm=512, mamba_n_heads=8, mamba_d_head=64,
        mamba_n_groups=1, mamba_d_state=64, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="float32")).to(torch.float32))


def write_mamba2(path: str, seed: int = 0) -> str:
    """Pure Mamba2 (no attention): hidden 256, 4 layers, 8 heads of 64, state 64, one group, conv width 4, chunk 64,
    vocab 1024, fp32."""
    import torch
    from transformers import Mamba2Config, Mamba2ForCausalLM

    return _write(path, seed, lambda: Mamba2ForCausalLM(Mamba2Config(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_heads=8, head_dim=64, expand=2, state_size=64,
        n_groups=1, conv_kernel=4, chunk_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        dtype="float32")).to(torch.float32))


def _qwen3_5_fields() -> dict:
    return dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, linear_conv_kernel_dim=4,
                linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="bfloat16")


def write_qwen3_5(path: str, seed: int = 0) -> str:
    """Qwen3.5 dense text model: hidden 256, 4 layers (gated delta x3, attention), vocab 1024, bf16."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    return _write(path, seed, lambda: Qwen3_5ForCausalLM(Qwen3_5TextConfig(**_qwen3_5_fields())).to(torch.bfloat16))


def write_qwen3_5_moe(path: str, seed: int = 0) -> str:
    """Qwen3.5 MoE text model: hidden 256, 4 layers (gated delta x3, attention), every MLP 4 experts (top 2, 128
    wide) and a shared expert of 128, vocab 1024, bf16."""
    import torch
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    fields = {k: v for k, v in _qwen3_5_fields().items() if k != "intermediate_size"}
    return _write(path, seed, lambda: Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(
        **fields, moe_intermediate_size=128, shared_expert_intermediate_size=128, num_experts_per_tok=2,
        num_experts=4)).to(torch.bfloat16))


def write_granite_hybrid_chunk256(path: str, seed: int = 0) -> str:
    """GraniteMoeHybrid as write_granite_hybrid (dense MLP) with Granite-4.0-H's published Mamba2 chunk of 256."""
    import torch
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    return _write(path, seed, lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, num_local_experts=0, shared_intermediate_size=256,
        layer_types=["mamba", "mamba", "attention", "mamba", "mamba", "attention"],
        mamba_n_heads=8, mamba_n_groups=1, mamba_d_state=64, mamba_d_head=64, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=256, position_embedding_type="rope", bos_token_id=1, eos_token_id=2, pad_token_id=0,
        dtype="float32")).to(torch.float32))


def write_jamba(path: str, seed: int = 0) -> str:
    """Jamba (refused by the connector: Mamba-1 layers): hidden 128, 4 layers (Mamba-1 x3, attention), dense MLP,
    vocab 1024, fp32."""
    import torch
    from transformers import JambaConfig, JambaForCausalLM

    return _write(path, seed, lambda: JambaForCausalLM(JambaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, attn_layer_period=4, attn_layer_offset=3,
        expert_layer_period=4, expert_layer_offset=1, num_experts=1, num_experts_per_tok=1, mamba_d_state=16,
        mamba_d_conv=4, mamba_expand=2, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        dtype="float32")).to(torch.float32))


# ----------------------------------------------------------------------------------------------------------------
# Realistic layer shapes (bench/vllm_side_by_side.py --model), random weights, the vocabulary cut to REAL_VOCAB

#: The vocabulary of the realistic-shape checkpoints: the published ones have 100,352 (Granite-4.0-H) and 248,320
#: (Qwen3.5) ids, whose embedding and LM head would dominate load time and memory and change no cached token count.
REAL_VOCAB = 4096

#: Granite-4.0-H-350M's layer types: 32 layers, attention at 10, 13, 17 and 27, Mamba2 elsewhere.
GRANITE_350M_LAYERS = ["attention" if i in (10, 13, 17, 27) else "mamba" for i in range(32)]


def write_granite_4_h_350m(path: str, seed: int = 0, layers: int = 32) -> str:
    """GraniteMoeHybrid at Granite-4.0-H-350M's shape: hidden 768, 32 layers (Mamba2 x28, attention at 10, 13, 17,
    27), dense MLP (no experts; shared MLP 2048 wide), attention 12 heads of 64 with 4 KV heads, Mamba2 48 heads of 32,
    state 128, one group, conv width 4, expand 2, chunk 256; bf16 (the published dtype), vocab REAL_VOCAB. `layers` < 32
    keeps the first `layers` layer types."""
    import torch
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    types = GRANITE_350M_LAYERS[:layers]
    return _write(path, seed, lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=REAL_VOCAB, hidden_size=768, intermediate_size=2048, num_hidden_layers=len(types),
        num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=32768, num_local_experts=0,
        num_experts_per_tok=0, shared_intermediate_size=2048, layer_types=types,
        mamba_n_heads=48, mamba_n_groups=1, mamba_d_state=128, mamba_d_head=32, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=256, position_embedding_type="rope", rope_theta=10000000.0, embedding_multiplier=12.0,
        logits_scaling=3.0, attention_multiplier=0.015625, residual_multiplier=0.246, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="bfloat16")).to(torch.bfloat16))


def write_qwen3_5_0_8b(path: str, seed: int = 0, layers: int = 8) -> str:
    """Qwen3.5 dense text model at Qwen3.5-0.8B's layer sizes: hidden 1024, MLP 3584, gated delta 16 key and 16
    value heads of 128 (conv width 4), attention 8 heads of 256 with 2 KV heads, every fourth layer attention; bf16,
    vocab REAL_VOCAB. The published model has 24 layers; `layers` (a multiple of 4) keeps the first of them (default
    8: gated delta x3, attention, twice), so that a run of every configuration fits a 2-core CPU."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
    return _write(path, seed, lambda: Qwen3_5ForCausalLM(Qwen3_5TextConfig(
        vocab_size=REAL_VOCAB, hidden_size=1024, intermediate_size=3584, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256, max_position_embeddings=32768,
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16,
        linear_num_value_heads=16, layer_types=types, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype="bfloat16")).to(torch.bfloat16))
