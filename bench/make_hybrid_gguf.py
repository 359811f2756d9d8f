#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Write a random-weight GGUF at the shape of a published small hybrid model, for llama-server benchmarks.

Benchmarks of prompt reuse (llama_side_by_side.py and friends) care about speed and cache behaviour: how many
layers hold recurrent state and how big it is, how many layers hold a KV cache and how wide it is, how long a
prefill or a decode step takes at a realistic width. None of that depends on what the weights say, so this
script writes models with the published layer pattern and tensor shapes but random weights, and a benchmark
can run at realistic shapes without downloading a checkpoint. The text such a model writes is noise: read
timings and cache counters from it, never output quality.

Presets (llama.cpp architecture in brackets):
  granite-4.0-h-350m  [granitehybrid]  Granite-4.0-H-350M's shape: hidden 768, 32 layers, attention at layers
                      10, 13, 17, 27 (12 heads, 4 KV heads, head dim 64, no RoPE as in the converted
                      checkpoints), Mamba2 everywhere else (48 heads x head dim 32, d_inner 1536, state 128,
                      1 group, conv 4), shared MLP 2048, no experts, vocab 100352, tied embeddings, Granite's
                      multipliers (embedding 12, residual 0.246, attention 0.0078125, logits 3).
                      About 340M parameters, ~0.36 GB in Q8_0.
  qwen3.5-0.8b-like   [qwen35]  the text part of Qwen3.5-0.8B: hidden 1024, 24 layers, full (gated) attention
                      every 4th layer (8 heads, 2 KV heads, head dim 256, RoPE on 64 dims, IMRoPE sections
                      11/11/10/0, theta 1e7), gated delta net everywhere else (16 key heads, 16 value heads,
                      key and value head dim 128, conv 4), FFN 3584, tied embeddings. The published
                      checkpoint's vocabulary has 248320 entries and that is the default here (the embedding
                      is a third of the model); --vocab 151936 gives the Qwen2/Qwen3 vocabulary size instead.
                      About 0.75B parameters, ~0.8 GB in Q8_0. No vision tower, no MTP head.

Weights: 2-D weight matrices are N(0, --std) and written as Q8_0 (default; gguf-py's quantizer), f16 or f32.
Norm weights are ones; Mamba2 and gated-delta parameters follow the usual initialisation so the recurrences stay
tame: A = -exp(A_log) with exp(A_log) uniform in [1, 16], dt_bias the inverse softplus of a dt drawn
log-uniformly from [1e-3, 1e-1], D ones, conv kernels uniform in +-1/sqrt(kernel). Those small tensors, the
conv kernels and all 1-D tensors stay f32. Each tensor's values come from its own generator seeded by --seed
and the tensor's name, so a file is reproducible.

Tokenizer: llama.cpp's "test" vocabulary (the one tests/test-llama-archs.cpp uses): vocab-size tokens named
tok_<id>, no BOS/EOS, text tokenized in 5-byte chunks hashed to an id, ids detokenized as hex. Benchmarks send
token ids; /tokenize works for any text (e.g. "<user>" gives 2 tokens), and generation stops at n_predict.

--layers N (fewer than the preset's, for quick tests) writes N layers with the attention layers placed in about
the published proportion and positions, at least one attention and one recurrent layer; widths do not change.

Needs numpy and llama.cpp's gguf-py, taken from <repo>/.deps/llama.cpp/gguf-py (scripts/fetch-llama.sh).

Examples:
  bench/make_hybrid_gguf.py --preset granite-4.0-h-350m --out /tmp/granite-h-350m-q8.gguf
  bench/make_hybrid_gguf.py --preset qwen3.5-0.8b-like --out /tmp/qwen35-08b-q8.gguf --ctx 32768
  bench/make_hybrid_gguf.py --preset granite-4.0-h-350m --layers 4 --type f16 --out /tmp/granite-4l.gguf
  bench/llama_side_by_side.py --server .deps/llama.cpp/build/bin/llama-server --model /tmp/granite-h-350m-q8.gguf
"""
import argparse
import math
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GGUF_PY = REPO / ".deps" / "llama.cpp" / "gguf-py"

try:
    import numpy as np
except ImportError:
    print("make_hybrid_gguf.py needs numpy (pip install numpy)", file=sys.stderr)
    sys.exit(2)

if not (GGUF_PY / "gguf" / "__init__.py").is_file():
    print(f"gguf-py not found at {GGUF_PY}: run scripts/fetch-llama.sh --no-build first", file=sys.stderr)
    sys.exit(2)
sys.path.insert(0, str(GGUF_PY))
import gguf  # noqa: E402

PRESETS = {
    "granite-4.0-h-350m": dict(
        kind="granite", arch=gguf.MODEL_ARCH.GRANITE_HYBRID, name="Granite-4.0-H-350M shape, random weights",
        n_embd=768, n_layer=32, attn_layers=[10, 13, 17, 27], n_ff=2048, n_vocab=100352,
        n_head=12, n_head_kv=4, head_dim=64, rope_theta=10000.0, rms_eps=1e-5,
        ssm_heads=48, ssm_head_dim=32, ssm_state=128, ssm_groups=1, ssm_conv=4,
        embedding_scale=12.0, residual_scale=0.246, attention_scale=0.0078125, logit_scale=3.0),
    "qwen3.5-0.8b-like": dict(
        kind="qwen35", arch=gguf.MODEL_ARCH.QWEN35, name="Qwen3.5-0.8B text shape, random weights",
        n_embd=1024, n_layer=24, full_attn_interval=4, n_ff=3584, n_vocab=248320,
        n_head=8, n_head_kv=2, head_dim=256, n_rot=64, rope_sections=[11, 11, 10, 0], rope_theta=1.0e7,
        rms_eps=1e-6, gdn_k_heads=16, gdn_v_heads=16, gdn_k_dim=128, gdn_v_dim=128, ssm_conv=4),
}

TYPES = {
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
}

ROWS_PER_CHUNK = 4096  # rows generated and quantized at a time: bounds the f32 scratch of big matrices


def tname(tensor, bid=None, suffix=".weight"):
    """A tensor's GGUF name from gguf-py's table."""
    base = gguf.TENSOR_NAMES[tensor]
    return (base.format(bid=bid) if bid is not None else base) + suffix


def attention_layers(preset, n_layer):
    """Attention layer indices for n_layer layers, in the preset's proportion."""
    if preset["kind"] == "qwen35":
        interval = preset["full_attn_interval"]
        if n_layer < interval:
            return [n_layer - 1]
        return [i for i in range(n_layer) if (i + 1) % interval == 0]
    full, n_full = preset["attn_layers"], preset["n_layer"]
    if n_layer == n_full:
        return list(full)
    # the published positions scaled to n_layer, thinned to the published share of attention layers
    scaled = sorted({min(n_layer - 1, int(i * n_layer / n_full)) for i in full})
    want = max(1, min(n_layer - 1, round(len(full) * n_layer / n_full)))
    if len(scaled) <= want:
        return scaled
    if want == 1:
        return [scaled[len(scaled) // 2]]
    return sorted({scaled[round(j * (len(scaled) - 1) / (want - 1))] for j in range(want)})


# Tensor specs: (name, numpy shape (rows, ..., row), init, is_matrix). init is ("normal",), ("ones",),
# ("uniform", bound), ("ssm_a",), ("dt_bias",). Matrices take the --type; everything else stays f32.

def granite_specs(p, n_layer, attn):
    T = gguf.MODEL_TENSOR
    E, V, F = p["n_embd"], p["n_vocab"], p["n_ff"]
    d_inner = p["ssm_heads"] * p["ssm_head_dim"]
    d_xbc = d_inner + 2 * p["ssm_groups"] * p["ssm_state"]
    d_in_proj = d_inner + d_xbc + p["ssm_heads"]
    conv_bound = 1.0 / math.sqrt(p["ssm_conv"])
    s = [(tname(T.TOKEN_EMBD), (V, E), ("normal",), True),
         (tname(T.OUTPUT_NORM), (E,), ("ones",), False)]
    for i in range(n_layer):
        s.append((tname(T.ATTN_NORM, i), (E,), ("ones",), False))
        if i in attn:
            q, kv = p["n_head"] * p["head_dim"], p["n_head_kv"] * p["head_dim"]
            s += [(tname(T.ATTN_Q, i), (q, E), ("normal",), True),
                  (tname(T.ATTN_K, i), (kv, E), ("normal",), True),
                  (tname(T.ATTN_V, i), (kv, E), ("normal",), True),
                  (tname(T.ATTN_OUT, i), (E, q), ("normal",), True)]
        else:
            H, G = p["ssm_heads"], p["ssm_groups"]
            s += [(tname(T.SSM_IN, i), (d_in_proj, E), ("normal",), True),
                  (tname(T.SSM_CONV1D, i), (d_xbc, p["ssm_conv"]), ("uniform", conv_bound), False),
                  (tname(T.SSM_CONV1D, i, ".bias"), (d_xbc,), ("uniform", conv_bound), False),
                  (tname(T.SSM_DT, i, ".bias"), (H,), ("dt_bias",), False),
                  (tname(T.SSM_A, i, ""), (H, 1), ("ssm_a",), False),
                  (tname(T.SSM_D, i, ""), (H, 1), ("ones",), False),
                  (tname(T.SSM_NORM, i), (G, d_inner // G), ("ones",), False),
                  (tname(T.SSM_OUT, i), (E, d_inner), ("normal",), True)]
        s += [(tname(T.FFN_NORM, i), (E,), ("ones",), False),
              (tname(T.FFN_GATE, i), (F, E), ("normal",), True),
              (tname(T.FFN_UP, i), (F, E), ("normal",), True),
              (tname(T.FFN_DOWN, i), (E, F), ("normal",), True)]
    return s


def qwen35_specs(p, n_layer, attn):
    T = gguf.MODEL_TENSOR
    E, V, F, D = p["n_embd"], p["n_vocab"], p["n_ff"], p["head_dim"]
    key_dim = p["gdn_k_heads"] * p["gdn_k_dim"]
    value_dim = p["gdn_v_heads"] * p["gdn_v_dim"]
    conv_dim = 2 * key_dim + value_dim
    conv_bound = 1.0 / math.sqrt(p["ssm_conv"])
    s = [(tname(T.TOKEN_EMBD), (V, E), ("normal",), True),
         (tname(T.OUTPUT_NORM), (E,), ("ones",), False)]
    for i in range(n_layer):
        s += [(tname(T.ATTN_NORM, i), (E,), ("ones",), False),
              (tname(T.ATTN_POST_NORM, i), (E,), ("ones",), False)]
        if i in attn:
            # attn_q carries query and output gate interleaved per head: 2 * n_head * head_dim rows
            q, kv = p["n_head"] * D, p["n_head_kv"] * D
            s += [(tname(T.ATTN_Q, i), (2 * q, E), ("normal",), True),
                  (tname(T.ATTN_K, i), (kv, E), ("normal",), True),
                  (tname(T.ATTN_V, i), (kv, E), ("normal",), True),
                  (tname(T.ATTN_OUT, i), (E, q), ("normal",), True),
                  (tname(T.ATTN_Q_NORM, i), (D,), ("ones",), False),
                  (tname(T.ATTN_K_NORM, i), (D,), ("ones",), False)]
        else:
            H = p["gdn_v_heads"]
            s += [(tname(T.ATTN_QKV, i), (conv_dim, E), ("normal",), True),
                  (tname(T.ATTN_GATE, i), (value_dim, E), ("normal",), True),
                  (tname(T.SSM_CONV1D, i), (conv_dim, p["ssm_conv"]), ("uniform", conv_bound), False),
                  (tname(T.SSM_DT, i, ".bias"), (H,), ("dt_bias",), False),
                  (tname(T.SSM_A, i, ""), (H,), ("ssm_a",), False),
                  (tname(T.SSM_BETA, i), (H, E), ("normal",), True),
                  (tname(T.SSM_ALPHA, i), (H, E), ("normal",), True),
                  (tname(T.SSM_NORM, i), (p["gdn_v_dim"],), ("ones",), False),
                  (tname(T.SSM_OUT, i), (E, value_dim), ("normal",), True)]
        s += [(tname(T.FFN_GATE, i), (F, E), ("normal",), True),
              (tname(T.FFN_UP, i), (F, E), ("normal",), True),
              (tname(T.FFN_DOWN, i), (E, F), ("normal",), True)]
    return s


def add_metadata(w, p, args, n_layer, attn, ftype):
    w.add_name(p["name"])
    w.add_description("random weights at a published shape, written by Reprise's bench/make_hybrid_gguf.py "
                      f"(preset {args.preset}, seed {args.seed}, std {args.std}); for speed and cache benchmarks")
    w.add_file_type(int(ftype))
    if args.type == "q8_0":
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_vocab_size(p["n_vocab"])
    w.add_context_length(args.ctx)
    w.add_embedding_length(p["n_embd"])
    w.add_block_count(n_layer)
    w.add_feed_forward_length(p["n_ff"])
    w.add_head_count(p["n_head"])
    w.add_key_length(p["head_dim"])
    w.add_value_length(p["head_dim"])
    w.add_layer_norm_rms_eps(p["rms_eps"])
    w.add_rope_freq_base(p["rope_theta"])
    w.add_ssm_conv_kernel(p["ssm_conv"])
    if p["kind"] == "granite":
        # per-layer KV head counts: 0 marks a Mamba2 layer
        w.add_head_count_kv([p["n_head_kv"] if i in attn else 0 for i in range(n_layer)])
        w.add_rope_scaling_finetuned(False)  # Granite-4.0-H uses no positional encoding (converter: NoPE)
        w.add_ssm_inner_size(p["ssm_heads"] * p["ssm_head_dim"])
        w.add_ssm_state_size(p["ssm_state"])
        w.add_ssm_group_count(p["ssm_groups"])
        w.add_ssm_time_step_rank(p["ssm_heads"])  # llama.cpp reads the Mamba2 head count from this key
        w.add_embedding_scale(p["embedding_scale"])
        w.add_residual_scale(p["residual_scale"])
        w.add_attention_scale(p["attention_scale"])
        w.add_logit_scale(p["logit_scale"])
        w.add_expert_count(0)
    else:
        w.add_head_count_kv(p["n_head_kv"])
        w.add_rope_dimension_count(p["n_rot"])
        w.add_rope_dimension_sections(p["rope_sections"])
        w.add_full_attention_interval(p["full_attn_interval"])
        w.add_recurrent_layers([i not in attn for i in range(n_layer)])
        w.add_ssm_inner_size(p["gdn_v_heads"] * p["gdn_v_dim"])
        w.add_ssm_state_size(p["gdn_k_dim"])
        w.add_ssm_group_count(p["gdn_k_heads"])
        w.add_ssm_time_step_rank(p["gdn_v_heads"])
    # llama.cpp's "test" vocabulary: no merges, no special tokens
    w.add_tokenizer_model("test")
    w.add_token_list([f"tok_{i}" for i in range(p["n_vocab"])])
    w.add_token_scores([0.0] * p["n_vocab"])


def small_values(init, shape, rng):
    """The f32 values of a non-matrix tensor."""
    what = init[0]
    if what == "ones":
        return np.ones(shape, dtype=np.float32)
    if what == "uniform":
        return rng.uniform(-init[1], init[1], size=shape).astype(np.float32)
    if what == "ssm_a":  # A = -exp(A_log), exp(A_log) ~ U[1, 16]
        return -rng.uniform(1.0, 16.0, size=shape).astype(np.float32)
    if what == "dt_bias":  # inverse softplus of dt ~ logU[1e-3, 1e-1]
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), size=shape))
        dt = np.maximum(dt, 1e-4)
        return (dt + np.log(-np.expm1(-dt))).astype(np.float32)
    raise ValueError(init)


def matrix_bytes(shape, qtype):
    if qtype == gguf.GGMLQuantizationType.Q8_0:
        return shape, np.uint8, gguf.quants.quant_shape_to_byte_shape(shape, qtype)
    return shape, (np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32), shape


def matrix_data(shape, qtype, std, rng):
    """N(0, std) matrix in qtype, generated and converted ROWS_PER_CHUNK rows at a time."""
    _, dtype, out_shape = matrix_bytes(shape, qtype)
    out = np.empty(out_shape, dtype=dtype)
    rows = shape[0]
    for r0 in range(0, rows, ROWS_PER_CHUNK):
        r1 = min(rows, r0 + ROWS_PER_CHUNK)
        chunk = rng.standard_normal((r1 - r0, *shape[1:]), dtype=np.float32)
        chunk *= std
        out[r0:r1] = gguf.quants.quantize(chunk, qtype)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Presets: " + ", ".join(PRESETS) + ". See the module docstring for details.")
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True, help="the GGUF file to write")
    ap.add_argument("--type", default="q8_0", choices=sorted(TYPES), help="type of the 2-D weight matrices")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--std", type=float, default=0.02, help="std of the random weight matrices")
    ap.add_argument("--layers", type=int, help="layer count override (attention layers kept in proportion)")
    ap.add_argument("--ctx", type=int, default=65536, help="training context length written to the file")
    ap.add_argument("--vocab", type=int, help="vocabulary size override")
    args = ap.parse_args()

    p = dict(PRESETS[args.preset])
    if args.vocab is not None:
        if args.vocab < 256:
            ap.error("--vocab must be at least 256")
        p["n_vocab"] = args.vocab
    n_layer = p["n_layer"] if args.layers is None else args.layers
    if n_layer < 2:
        ap.error("--layers must be at least 2 (one attention and one recurrent layer)")
    attn = attention_layers(p, n_layer)
    qtype, ftype = TYPES[args.type]
    specs = (granite_specs if p["kind"] == "granite" else qwen35_specs)(p, n_layer, attn)

    t0 = time.time()
    arch = gguf.MODEL_ARCH_NAMES[p["arch"]]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(out, arch)
    add_metadata(w, p, args, n_layer, attn, ftype)

    n_params = 0
    for name, shape, _init, is_matrix in specs:
        n_params += math.prod(shape)
        if is_matrix:
            _, dtype, byte_shape = matrix_bytes(shape, qtype)
            nbytes = math.prod(byte_shape) * np.dtype(dtype).itemsize
            w.add_tensor_info(name, byte_shape, np.dtype(dtype), nbytes,
                              raw_dtype=qtype if qtype == gguf.GGMLQuantizationType.Q8_0 else None)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), math.prod(shape) * 4)

    print(f"{args.preset}: arch {arch}, {n_layer} layers, attention at {attn}, vocab {p['n_vocab']}, "
          f"{n_params / 1e6:.1f}M parameters, matrices {args.type} -> {out}", file=sys.stderr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    last = time.time()
    for k, (name, shape, init, is_matrix) in enumerate(specs):
        rng = np.random.default_rng([args.seed, zlib.crc32(name.encode())])
        if is_matrix:
            data = matrix_data(shape, qtype, args.std, rng)
        else:
            data = small_values(init, shape, rng)
        w.write_tensor_data(data)
        del data
        if time.time() - last > 5:
            last = time.time()
            print(f"  {k + 1}/{len(specs)} tensors, {time.time() - t0:.0f} s", file=sys.stderr)
    w.close()
    size = out.stat().st_size
    print(f"wrote {out}: {len(specs)} tensors, {size / 1e6:.1f} MB, {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
