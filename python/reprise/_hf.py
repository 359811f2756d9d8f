# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Layer layouts from Hugging Face ``config.json`` dicts (used by :meth:`reprise.ModelConfig.from_hf_config`).

Only the stateful layers matter to a cache: attention layers (KV heads, head dim) and recurrent layers (Mamba2,
gated delta). MLP and MoE layers carry no state across tokens and are skipped. Each reader returns
``[(shape, count), ...]``; ``ModelConfig`` validates the result with the C++ rules, so byte figures and the
alignment unit come from the library itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ._reprise import GatedDeltaShape, KvShape, Mamba2Shape

Groups = list[tuple[Any, int]]

# Architectures whose every stateful layer is attention.
_ATTENTION_ONLY = {
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "GraniteForCausalLM",
    "Gemma2ForCausalLM",
    "Phi3ForCausalLM",
}

# Architectures Reprise cannot cache, with the reason.
_UNSUPPORTED = {
    "JambaForCausalLM": "Mamba-1 layers (selective scan without SSD chunks); Reprise supports Mamba2 and gated delta",
    "MambaForCausalLM": "Mamba-1 layers; Reprise supports Mamba2 and gated delta",
    "FalconMambaForCausalLM": "Mamba-1 layers; Reprise supports Mamba2 and gated delta",
    "Zamba2ForCausalLM": "shared attention blocks reused across depths (one KV cache per use); not modeled",
    "Lfm2ForCausalLM": "short-convolution layers without a matrix state; not modeled",
}


def _need(config: dict, key: str, arch: str) -> Any:
    if key not in config or config[key] is None:
        raise ValueError(f"{arch}: config.json has no '{key}', which Reprise needs to size the cache")
    return config[key]


def _head_dim(config: dict, arch: str) -> int:
    for key in ("head_dim", "attention_head_dim"):
        if config.get(key):
            return int(config[key])
    heads = _need(config, "num_attention_heads", arch)
    return int(_need(config, "hidden_size", arch)) // int(heads)


def _kv(config: dict, arch: str, block_size: int) -> KvShape:
    kv_heads = config.get("num_key_value_heads") or _need(config, "num_attention_heads", arch)
    return KvShape(kv_heads=int(kv_heads), head_dim=_head_dim(config, arch), block_size=block_size)


def _groups(counts: Counter, shapes: dict) -> Groups:
    return [(shapes[kind], n) for kind, n in counts.items() if n > 0]


def _nemotron_h(config: dict, arch: str, block_size: int) -> Groups:
    if config.get("hybrid_override_pattern") is None and config.get("layers_block_type"):
        # Later Nemotron-H configs spell the pattern out: "mamba", "attention", "mlp", "moe".
        kinds = config["layers_block_type"]
        unknown = sorted(set(kinds) - {"mamba", "attention", "mlp", "moe"})
        if unknown:
            raise ValueError(f"{arch}: unsupported layer kind(s) {unknown} in layers_block_type")
        pattern = "".join({"mamba": "M", "attention": "*"}.get(k, "-") for k in kinds)
    else:
        pattern = _need(config, "hybrid_override_pattern", arch)
    unknown = sorted(set(pattern) - set("M*-E"))
    if unknown:
        raise ValueError(f"{arch}: unsupported layer kind(s) {unknown} in hybrid_override_pattern "
                         "(Reprise knows M = Mamba2, * = attention, - = MLP, E = MoE)")
    counts = Counter(c for c in pattern if c in "M*")
    mamba = Mamba2Shape(heads=int(_need(config, "mamba_num_heads", arch)),
                        head_dim=int(_need(config, "mamba_head_dim", arch)),
                        state_dim=int(_need(config, "ssm_state_size", arch)),
                        groups=int(_need(config, "n_groups", arch)),
                        conv_width=int(config.get("conv_kernel", 4)),
                        chunk=int(config.get("chunk_size", 256)))
    return _groups(counts, {"*": _kv(config, arch, block_size), "M": mamba})


def _mamba2_fields(config: dict, arch: str) -> Mamba2Shape:
    heads = int(_need(config, "mamba_n_heads", arch))
    head_dim = config.get("mamba_d_head")
    if head_dim in (None, "auto"):
        inner = config.get("mamba_d_ssm") or int(config.get("mamba_expand", 2)) * int(_need(config, "hidden_size", arch))
        head_dim = int(inner) // heads
    return Mamba2Shape(heads=heads, head_dim=int(head_dim),
                       state_dim=int(_need(config, "mamba_d_state", arch)),
                       groups=int(config.get("mamba_n_groups", 1)),
                       conv_width=int(config.get("mamba_d_conv", 4)),
                       chunk=int(config.get("mamba_chunk_size", 256)))


def _granite_hybrid(config: dict, arch: str, block_size: int) -> Groups:
    kinds = config.get("layer_types") or config.get("layers_block_type")
    if not kinds:
        kinds = ["mamba"] * int(_need(config, "num_hidden_layers", arch))
    unknown = sorted(set(kinds) - {"mamba", "attention"})
    if unknown:
        raise ValueError(f"{arch}: unsupported layer kind(s) {unknown} in layer_types")
    return _groups(Counter(kinds), {"attention": _kv(config, arch, block_size), "mamba": _mamba2_fields(config, arch)})


def _bamba(config: dict, arch: str, block_size: int) -> Groups:
    layers = int(_need(config, "num_hidden_layers", arch))
    attention = set(config.get("attn_layer_indices") or [])
    counts = Counter("attention" if i in attention else "mamba" for i in range(layers))
    return _groups(counts, {"attention": _kv(config, arch, block_size), "mamba": _mamba2_fields(config, arch)})


def _falcon_h1(config: dict, arch: str, block_size: int) -> Groups:
    # Every Falcon-H1 layer runs attention and a Mamba2 mixer side by side.
    layers = int(_need(config, "num_hidden_layers", arch))
    return [(_kv(config, arch, block_size), layers), (_mamba2_fields(config, arch), layers)]


def _qwen3_next(config: dict, arch: str, block_size: int) -> Groups:
    config = config.get("text_config", config)  # Qwen3.5 nests the language model's fields
    kinds = config.get("layer_types")
    if not kinds:
        layers = int(_need(config, "num_hidden_layers", arch))
        interval = int(_need(config, "full_attention_interval", arch))
        kinds = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    unknown = sorted(set(kinds) - {"full_attention", "linear_attention"})
    if unknown:
        raise ValueError(f"{arch}: unsupported layer kind(s) {unknown} in layer_types")
    delta = GatedDeltaShape(key_heads=int(_need(config, "linear_num_key_heads", arch)),
                            value_heads=int(_need(config, "linear_num_value_heads", arch)),
                            key_dim=int(_need(config, "linear_key_head_dim", arch)),
                            value_dim=int(_need(config, "linear_value_head_dim", arch)),
                            conv_width=int(config.get("linear_conv_kernel_dim", 4)),
                            chunk=64)  # the chunk of flash-linear-attention's kernels; not in config.json
    return _groups(Counter(kinds), {"full_attention": _kv(config, arch, block_size), "linear_attention": delta})


def _attention_only(config: dict, arch: str, block_size: int) -> Groups:
    kinds = config.get("layer_types")
    if kinds and set(kinds) - {"full_attention"}:
        raise ValueError(f"{arch}: layer kind(s) {sorted(set(kinds) - {'full_attention'})} are not supported "
                         "(sliding-window KV is not modeled)")
    return [(_kv(config, arch, block_size), int(_need(config, "num_hidden_layers", arch)))]


_READERS: dict[str, Callable[[dict, str, int], Groups]] = {
    "NemotronHForCausalLM": _nemotron_h,
    "Qwen3NextForCausalLM": _qwen3_next,
    "Qwen3_5ForCausalLM": _qwen3_next,
    "Qwen3_5ForConditionalGeneration": _qwen3_next,
    "Qwen3_5MoeForCausalLM": _qwen3_next,
    "Qwen3_5MoeForConditionalGeneration": _qwen3_next,
    "FalconH1ForCausalLM": _falcon_h1,
    "GraniteMoeHybridForCausalLM": _granite_hybrid,
    "BambaForCausalLM": _bamba,
    **{name: _attention_only for name in _ATTENTION_ONLY},
}


def layer_groups(config: dict, block_size: int = 16) -> Groups:
    """The stateful layer groups ``[(shape, count), ...]`` of a Hugging Face ``config.json`` dict.

    Raises ValueError when the architecture, a layer kind or a needed field is not supported or missing.
    """
    if not isinstance(config, dict):
        raise TypeError("from_hf_config: pass the parsed config.json as a dict")
    archs = config.get("architectures") or []
    if not archs:
        raise ValueError("config.json has no 'architectures' entry: cannot tell the model family")
    arch = archs[0]
    if arch in _UNSUPPORTED:
        raise ValueError(f"{arch} is not supported: {_UNSUPPORTED[arch]}")
    reader = _READERS.get(arch)
    if reader is None:
        known = ", ".join(sorted(_READERS))
        raise ValueError(f"{arch} is not a supported architecture (supported: {known})")
    return reader(config, arch, int(block_size))
