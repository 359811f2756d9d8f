// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// The Hugging Face config.json reader (reprise::hf_config). One function per architecture; each names the
/// defaults of transformers' config class for that architecture in one place (a `defaults` block at its top).

#include <reprise/state/hf_config.hpp>

#include <simdjson.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace reprise {
namespace {

namespace dom = simdjson::dom;

/// Thrown inside the reader only (never across its API): the first problem found, with its errc.
struct read_error {
  errc code;
  std::string message;
};

/// One config object (the top level, or Qwen3.5's `text_config`) with the architecture named for messages.
class fields {
public:
  fields(dom::object o, std::string arch) : o_(o), arch_(std::move(arch)) {}

  const std::string& arch() const noexcept { return arch_; }
  dom::object object() const noexcept { return o_; }

  /// The value of `key`, or nothing when it is absent or null (transformers treats null as "use the default").
  std::optional<dom::element> find(std::string_view key) const {
    dom::element e;
    if (o_.at_key(key).get(e) != simdjson::SUCCESS) return std::nullopt;
    if (e.is_null()) return std::nullopt;
    return e;
  }
  bool has(std::string_view key) const { return find(key).has_value(); }

  [[noreturn]] void fail(errc code, const std::string& what) const { throw read_error{code, arch_ + ": " + what}; }

  /// A positive integer that fits in 32 bits.
  std::uint32_t to_u32(std::string_view key, dom::element e) const {
    std::int64_t v = 0;
    if (e.get_int64().get(v) != simdjson::SUCCESS)
      fail(errc::invalid_argument, "config.json field '" + std::string(key) + "' must be an integer, got " +
                                       simdjson::to_string(e));
    if (v <= 0 || v > std::numeric_limits<std::uint32_t>::max())
      fail(errc::invalid_argument, "config.json field '" + std::string(key) + "' must be a positive 32-bit integer, "
                                       "got " + std::to_string(v));
    return static_cast<std::uint32_t>(v);
  }
  std::uint32_t u32(std::string_view key) const {
    const auto e = find(key);
    if (!e) fail(errc::invalid_argument, "config.json has no '" + std::string(key) + "', which Reprise needs to size the cache");
    return to_u32(key, *e);
  }
  /// The field, or transformers' default for this architecture when absent.
  std::uint32_t u32_or(std::string_view key, std::uint32_t fallback) const {
    const auto e = find(key);
    return e ? to_u32(key, *e) : fallback;
  }
  /// The first of `keys` present (aliases of one field), or `fallback`.
  std::uint32_t first_u32_or(std::initializer_list<std::string_view> keys, std::uint32_t fallback) const {
    for (std::string_view k : keys)
      if (auto e = find(k)) return to_u32(k, *e);
    return fallback;
  }
  std::optional<std::string_view> string(std::string_view key) const {
    const auto e = find(key);
    if (!e) return std::nullopt;
    std::string_view s;
    if (e->get_string().get(s) != simdjson::SUCCESS)
      fail(errc::invalid_argument, "config.json field '" + std::string(key) + "' must be a string, got " +
                                       simdjson::to_string(*e));
    return s;
  }
  /// A list of strings (layer kinds), or nothing when absent.
  std::optional<std::vector<std::string_view>> strings(std::string_view key) const {
    const auto e = find(key);
    if (!e) return std::nullopt;
    dom::array a;
    if (e->get_array().get(a) != simdjson::SUCCESS)
      fail(errc::invalid_argument, "config.json field '" + std::string(key) + "' must be a list of strings");
    std::vector<std::string_view> out;
    for (dom::element item : a) {
      std::string_view s;
      if (item.get_string().get(s) != simdjson::SUCCESS)
        fail(errc::invalid_argument, "config.json field '" + std::string(key) + "' must be a list of strings, got " +
                                         simdjson::to_string(item));
      out.push_back(s);
    }
    return out;
  }
  std::optional<dtype> dtype_field(std::string_view key) const {
    const auto s = string(key);
    if (!s) return std::nullopt;
    dtype t{};
    if (!parse_dtype(*s, t))
      fail(errc::invalid_argument, "config.json field '" + std::string(key) + "' names an unknown dtype '" +
                                       std::string(*s) + "'");
    return t;
  }

private:
  dom::object o_;
  std::string arch_;
};

/// The dtypes of one read: the config's, then the engine's overrides.
struct dtypes {
  dtype kv = dtype::bf16;
  dtype state = dtype::f32;
  dtype conv = dtype::bf16;
};

/// The model's own dtype: `torch_dtype`, or `dtype` as newer transformers write it.
std::optional<dtype> model_dtype(const fields& f) {
  if (auto t = f.dtype_field("torch_dtype")) return t;
  return f.dtype_field("dtype");
}

/// The KV cache's dtype a quantization_config implies, if any.
std::optional<dtype> quantized_kv_dtype(const fields& f) {
  const auto q = f.find("quantization_config");
  if (!q) return std::nullopt;
  dom::object qo;
  if (q->get_object().get(qo) != simdjson::SUCCESS)
    f.fail(errc::invalid_argument, "config.json field 'quantization_config' must be an object");
  const fields qf(qo, f.arch());
  if (auto algo = qf.string("kv_cache_quant_algo")) { // ModelOpt (TensorRT-LLM, vLLM)
    if (*algo == "FP8") return dtype::f8_e4m3;
    f.fail(errc::unsupported_config, "quantization_config.kv_cache_quant_algo '" + std::string(*algo) +
                                         "' is not supported (FP8 is; pass kv_dtype to size another cache)");
  }
  if (auto scheme = qf.find("kv_cache_scheme")) { // compressed-tensors
    dom::object so;
    if (scheme->get_object().get(so) != simdjson::SUCCESS)
      f.fail(errc::invalid_argument, "config.json field 'quantization_config.kv_cache_scheme' must be an object");
    const fields sf(so, f.arch());
    const auto type = sf.string("type");
    const std::uint32_t bits = sf.u32_or("num_bits", 0);
    if (type && *type == "float" && bits == 8) return dtype::f8_e4m3;
    f.fail(errc::unsupported_config, "quantization_config.kv_cache_scheme (type '" + std::string(type.value_or("?")) +
                                         "', num_bits " + std::to_string(bits) +
                                         ") is not supported (8-bit float is; pass kv_dtype to size another cache)");
  }
  return std::nullopt;
}

dtypes read_dtypes(const fields& top, const fields& model, const hf_options& o) {
  dtypes d;
  const auto own = model_dtype(model) ? model_dtype(model) : model_dtype(top);
  if (own) d.kv = d.conv = *own;
  if (auto q = quantized_kv_dtype(top)) d.kv = *q;
  if (auto s = model.dtype_field("mamba_ssm_cache_dtype")) d.state = *s;
  if (o.kv_dtype) d.kv = *o.kv_dtype;
  if (o.state_dtype) d.state = *o.state_dtype;
  if (o.conv_dtype) d.conv = *o.conv_dtype;
  return d;
}

/// Attention heads' dimension: `head_dim` when given, else `fallback` (transformers' class default) when the
/// class has one, else hidden_size / num_attention_heads, which must divide.
std::uint32_t attention_head_dim(const fields& f, std::optional<std::uint32_t> fallback, std::uint32_t hidden,
                                 std::uint32_t heads) {
  if (f.has("head_dim")) return f.u32("head_dim");
  if (fallback) return *fallback;
  if (hidden % heads != 0)
    f.fail(errc::invalid_argument, "config.json has no 'head_dim' and hidden_size " + std::to_string(hidden) +
                                       " is not a multiple of num_attention_heads " + std::to_string(heads) +
                                       ": give head_dim");
  return hidden / heads;
}

/// `num_key_value_heads`: `absent` when the field is missing (the class default), `heads` when it is null
/// (every class: "for backward compatibility"), else its value.
std::uint32_t kv_heads_of(const fields& f, std::uint32_t absent, std::uint32_t heads) {
  dom::element raw;
  if (f.object().at_key("num_key_value_heads").get(raw) != simdjson::SUCCESS) return absent;
  return raw.is_null() ? heads : f.to_u32("num_key_value_heads", raw);
}

kv_shape kv(std::uint32_t kv_heads, std::uint32_t head_dim, const hf_options& o, const dtypes& d) {
  return kv_shape{.kv_heads = kv_heads, .head_dim = head_dim, .block_size = o.block_size, .type = d.kv};
}

/// Counts of each kind in a list of layer kinds; `kinds` maps a name to 'A' (attention), 'R' (recurrent) or
/// '-' (stateless); any other name is an error naming `field`.
std::pair<std::uint32_t, std::uint32_t> count_kinds(const fields& f, std::string_view field,
                                                    const std::vector<std::string_view>& names,
                                                    std::initializer_list<std::pair<std::string_view, char>> kinds) {
  std::uint32_t attention = 0, recurrent = 0;
  for (std::string_view n : names) {
    char k = 0;
    for (const auto& [name, kind] : kinds)
      if (name == n) k = kind;
    if (k == 0) {
      std::string known;
      for (const auto& [name, kind] : kinds) known += (known.empty() ? "'" : ", '") + std::string(name) + "'";
      f.fail(errc::invalid_argument, "unsupported layer kind '" + std::string(n) + "' in " + std::string(field) +
                                         " (Reprise knows " + known + ")");
    }
    attention += k == 'A';
    recurrent += k == 'R';
  }
  return {attention, recurrent};
}

std::vector<layer_spec> groups_of(std::uint32_t attention, const kv_shape& a, std::uint32_t recurrent,
                                  const std::variant<kv_shape, mamba2_shape, gated_delta_shape>& r) {
  std::vector<layer_spec> g;
  if (attention) g.push_back({a, attention});
  if (recurrent) g.push_back({r, recurrent});
  return g;
}

// --- Nemotron-H (transformers' NemotronHConfig) -------------------------------------------------------
std::vector<layer_spec> nemotron_h(const fields& f, const hf_options& o, const dtypes& d) {
  // NemotronHConfig: an explicit layers_block_type (alias layer_types) wins over the older
  // hybrid_override_pattern string.
  std::pair<std::uint32_t, std::uint32_t> counts;
  auto kinds = f.strings("layers_block_type");
  const char* kinds_field = "layers_block_type";
  if (!kinds) {
    kinds = f.strings("layer_types");
    kinds_field = "layer_types";
  }
  if (kinds) {
    counts = count_kinds(f, kinds_field, *kinds,
                         {{"mamba", 'R'}, {"linear_attention", 'R'}, {"attention", 'A'}, {"full_attention", 'A'},
                          {"mlp", '-'}, {"moe", '-'}});
  } else if (auto pattern = f.string("hybrid_override_pattern")) {
    std::vector<std::string_view> chars;
    for (std::size_t i = 0; i < pattern->size(); ++i) chars.push_back(pattern->substr(i, 1));
    counts = count_kinds(f, "hybrid_override_pattern", chars, {{"M", 'R'}, {"*", 'A'}, {"-", '-'}, {"E", '-'}});
  } else {
    f.fail(errc::invalid_argument, "config.json has neither 'layers_block_type' nor 'hybrid_override_pattern': "
                                   "cannot tell which layers are Mamba2 and which attention");
  }
  const std::uint32_t heads = f.u32_or("num_attention_heads", 32);
  // transformers: head_dim defaults to 128; earlier Nemotron-H configs spell it attention_head_dim.
  const std::uint32_t head_dim = f.first_u32_or({"head_dim", "attention_head_dim"}, 128);
  const std::uint32_t kv_heads = kv_heads_of(f, 8, heads);
  const mamba2_shape m{.heads = f.u32_or("mamba_num_heads", 128),
                       .head_dim = f.u32_or("mamba_head_dim", 64),
                       .state_dim = f.u32_or("ssm_state_size", 128),
                       .groups = f.first_u32_or({"n_groups", "mamba_n_groups"}, 8),
                       .conv_width = f.first_u32_or({"conv_kernel", "mamba_d_conv"}, 4),
                       .chunk = f.first_u32_or({"chunk_size", "mamba_chunk_size"}, 128),
                       .state_type = d.state,
                       .conv_type = d.conv};
  return groups_of(counts.first, kv(kv_heads, head_dim, o, d), counts.second, m);
}

/// Mamba2 fields named as Falcon-H1, Granite-4.0-H and Bamba name them. `intermediate` is the mixer's inner
/// size (heads x head dim must equal it; `intermediate_field` names where it came from).
mamba2_shape mamba2_fields(const fields& f, const dtypes& d, std::uint32_t intermediate,
                           const std::string& intermediate_field, std::uint32_t chunk_default) {
  const std::uint32_t heads = f.u32_or("mamba_n_heads", 128);
  if (intermediate % heads != 0)
    f.fail(errc::invalid_argument, "mamba_n_heads " + std::to_string(heads) + " does not divide " + intermediate_field +
                                       " " + std::to_string(intermediate));
  std::uint32_t head_dim = intermediate / heads;
  if (auto e = f.find("mamba_d_head")) {
    std::string_view s;
    if (e->get_string().get(s) == simdjson::SUCCESS) {
      if (s != "auto")
        f.fail(errc::invalid_argument, "config.json field 'mamba_d_head' must be an integer or \"auto\", got \"" +
                                           std::string(s) + "\"");
    } else {
      head_dim = f.to_u32("mamba_d_head", *e);
      if (std::uint64_t{head_dim} * heads != intermediate)
        f.fail(errc::invalid_argument, "mamba_d_head " + std::to_string(head_dim) + " x mamba_n_heads " +
                                           std::to_string(heads) + " != " + intermediate_field + " " +
                                           std::to_string(intermediate));
    }
  }
  return mamba2_shape{.heads = heads,
                      .head_dim = head_dim,
                      .state_dim = f.u32_or("mamba_d_state", 256),
                      .groups = f.u32_or("mamba_n_groups", 1),
                      .conv_width = f.u32_or("mamba_d_conv", 4),
                      .chunk = f.u32_or("mamba_chunk_size", chunk_default),
                      .state_type = d.state,
                      .conv_type = d.conv};
}

std::uint32_t expanded_by(const fields& f, const char* field, std::uint32_t hidden) {
  const std::uint64_t v = std::uint64_t{f.u32_or(field, 2)} * hidden;
  if (v > std::numeric_limits<std::uint32_t>::max())
    f.fail(errc::invalid_argument, std::string(field) + " x hidden_size does not fit in 32 bits");
  return static_cast<std::uint32_t>(v);
}

std::uint32_t expanded(const fields& f, std::uint32_t hidden) { return expanded_by(f, "mamba_expand", hidden); }

// --- Mamba2 (transformers' Mamba2Config): Mamba2 layers only, no attention ------------------------------
std::vector<layer_spec> mamba2(const fields& f, const hf_options& o, const dtypes& d) {
  const std::uint32_t heads = f.u32_or("num_heads", 128);
  const std::uint32_t head_dim = f.u32_or("head_dim", 64);
  // The mixer's inner size is expand x hidden_size (Mamba2Config); its heads must tile it exactly.
  const std::uint32_t inner = expanded_by(f, "expand", f.u32_or("hidden_size", 4096));
  if (std::uint64_t{heads} * head_dim != inner)
    f.fail(errc::invalid_argument, "num_heads " + std::to_string(heads) + " x head_dim " + std::to_string(head_dim) +
                                       " != expand x hidden_size " + std::to_string(inner));
  const mamba2_shape m{.heads = heads,
                       .head_dim = head_dim,
                       .state_dim = f.u32_or("state_size", 128),
                       .groups = f.u32_or("n_groups", 8),
                       .conv_width = f.u32_or("conv_kernel", 4),
                       .chunk = f.u32_or("chunk_size", 256),
                       .state_type = d.state,
                       .conv_type = d.conv};
  return groups_of(0, kv(1, 1, o, d), f.u32_or("num_hidden_layers", 64), m);
}

// --- Falcon-H1 (FalconH1Config): attention and Mamba2 side by side in every layer ------------------------
std::vector<layer_spec> falcon_h1(const fields& f, const hf_options& o, const dtypes& d) {
  const std::uint32_t layers = f.u32_or("num_hidden_layers", 32);
  const std::uint32_t hidden = f.u32_or("hidden_size", 4096);
  const std::uint32_t heads = f.u32_or("num_attention_heads", 32);
  const std::uint32_t kv_heads = kv_heads_of(f, 8, heads);
  // mamba_d_ssm: 1024 when absent, expand x hidden_size when null (FalconH1Config's rule).
  std::uint32_t intermediate = 1024;
  std::string from = "mamba_d_ssm";
  dom::element raw;
  if (f.object().at_key("mamba_d_ssm").get(raw) == simdjson::SUCCESS) {
    if (raw.is_null()) {
      intermediate = expanded(f, hidden);
      from = "mamba_expand x hidden_size";
    } else {
      intermediate = f.to_u32("mamba_d_ssm", raw);
    }
  }
  const mamba2_shape m = mamba2_fields(f, d, intermediate, from, 256);
  return {{kv(kv_heads, attention_head_dim(f, std::nullopt, hidden, heads), o, d), layers}, {m, layers}};
}

// --- Granite-4.0-H (GraniteMoeHybridConfig) -------------------------------------------------------------
std::vector<layer_spec> granite_hybrid(const fields& f, const hf_options& o, const dtypes& d) {
  const std::uint32_t hidden = f.u32_or("hidden_size", 4096);
  const std::uint32_t heads = f.u32_or("num_attention_heads", 32);
  const std::uint32_t kv_heads = kv_heads_of(f, heads, heads);
  std::pair<std::uint32_t, std::uint32_t> counts{0, f.u32_or("num_hidden_layers", 32)}; // default: all Mamba2
  for (std::string_view key : {"layer_types", "layers_block_type"})
    if (auto kinds = f.strings(key)) {
      // transformers 5 writes them as 'linear_attention' / 'full_attention', earlier versions as 'mamba' / 'attention'.
      counts = count_kinds(f, key, *kinds,
                           {{"mamba", 'R'}, {"attention", 'A'}, {"linear_attention", 'R'}, {"full_attention", 'A'}});
      break;
    }
  // Granite's attention always uses hidden_size / num_attention_heads.
  if (hidden % heads != 0)
    f.fail(errc::invalid_argument, "hidden_size " + std::to_string(hidden) + " is not a multiple of num_attention_heads " +
                                       std::to_string(heads));
  const mamba2_shape m = mamba2_fields(f, d, expanded(f, hidden), "mamba_expand x hidden_size", 256);
  return groups_of(counts.first, kv(kv_heads, hidden / heads, o, d), counts.second, m);
}

// --- Bamba (BambaConfig) -----------------------------------------------------------------------------------
std::vector<layer_spec> bamba(const fields& f, const hf_options& o, const dtypes& d) {
  const std::uint32_t layers = f.u32_or("num_hidden_layers", 32);
  const std::uint32_t hidden = f.u32_or("hidden_size", 4096);
  const std::uint32_t heads = f.u32_or("num_attention_heads", 32);
  const std::uint32_t kv_heads = kv_heads_of(f, 8, heads);
  std::uint32_t attention = 0;
  if (auto idx = f.find("attn_layer_indices")) {
    dom::array a;
    if (idx->get_array().get(a) != simdjson::SUCCESS)
      f.fail(errc::invalid_argument, "config.json field 'attn_layer_indices' must be a list of layer indices");
    std::vector<bool> seen(layers, false);
    for (dom::element e : a) {
      std::int64_t i = -1;
      if (e.get_int64().get(i) != simdjson::SUCCESS || i < 0 || i >= layers || seen[static_cast<std::size_t>(i)])
        f.fail(errc::invalid_argument, "attn_layer_indices holds " + simdjson::to_string(e) +
                                           ", not a distinct layer index below num_hidden_layers " + std::to_string(layers));
      seen[static_cast<std::size_t>(i)] = true;
      ++attention;
    }
  }
  const mamba2_shape m = mamba2_fields(f, d, expanded(f, hidden), "mamba_expand x hidden_size", 256);
  return groups_of(attention, kv(kv_heads, attention_head_dim(f, std::nullopt, hidden, heads), o, d),
                   layers - attention, m);
}

// --- Qwen3-Next and Qwen3.5 (Qwen3NextConfig, Qwen3_5TextConfig) ---------------------------------------
std::vector<layer_spec> qwen3_next(const fields& f, const hf_options& o, const dtypes& d, bool qwen3_5) {
  const std::uint32_t layers = f.u32_or("num_hidden_layers", qwen3_5 ? 32 : 48);
  std::pair<std::uint32_t, std::uint32_t> counts;
  if (auto kinds = f.strings("layer_types")) {
    counts = count_kinds(f, "layer_types", *kinds, {{"full_attention", 'A'}, {"linear_attention", 'R'}});
  } else {
    const std::uint32_t interval = f.u32_or("full_attention_interval", 4);
    counts = {layers / interval, layers - layers / interval};
  }
  const std::uint32_t heads = f.u32_or("num_attention_heads", 16);
  const std::uint32_t kv_heads = kv_heads_of(f, qwen3_5 ? 4 : 2, heads);
  const gated_delta_shape g{.key_heads = f.u32_or("linear_num_key_heads", 16),
                            .value_heads = f.u32_or("linear_num_value_heads", 32),
                            .key_dim = f.u32_or("linear_key_head_dim", 128),
                            .value_dim = f.u32_or("linear_value_head_dim", 128),
                            .conv_width = f.u32_or("linear_conv_kernel_dim", 4),
                            .chunk = 64, // flash-linear-attention's chunk; not a config field
                            .state_type = d.state,
                            .conv_type = d.conv};
  if (g.value_heads % g.key_heads != 0)
    f.fail(errc::invalid_argument, "linear_num_value_heads " + std::to_string(g.value_heads) +
                                       " is not a multiple of linear_num_key_heads " + std::to_string(g.key_heads));
  return groups_of(counts.first, kv(kv_heads, attention_head_dim(f, 256, 0, heads), o, d), counts.second, g);
}

// --- attention-only models ---------------------------------------------------------------------------------
std::vector<layer_spec> attention_only(const fields& f, const hf_options& o, const dtypes& d) {
  if (auto kinds = f.strings("layer_types")) count_kinds(f, "layer_types", *kinds, {{"full_attention", 'A'}});
  const std::uint32_t heads = f.u32("num_attention_heads");
  const std::uint32_t kv_heads = kv_heads_of(f, heads, heads);
  const std::uint32_t hidden = f.has("head_dim") ? 0 : f.u32("hidden_size");
  return {{kv(kv_heads, attention_head_dim(f, std::nullopt, hidden, heads), o, d), f.u32("num_hidden_layers")}};
}

constexpr std::array<std::string_view, 8> attention_only_archs = {
    "LlamaForCausalLM",   "MistralForCausalLM", "Qwen2ForCausalLM",  "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "GraniteForCausalLM", "Gemma2ForCausalLM", "Phi3ForCausalLM"};

struct unsupported {
  std::string_view arch;
  std::string_view why;
};
constexpr std::array<unsupported, 5> unsupported_archs = {{
    {"JambaForCausalLM", "Mamba-1 layers (selective scan without SSD chunks); Reprise supports Mamba2 and gated delta"},
    {"MambaForCausalLM", "Mamba-1 layers; Reprise supports Mamba2 and gated delta"},
    {"FalconMambaForCausalLM", "Mamba-1 layers; Reprise supports Mamba2 and gated delta"},
    {"Zamba2ForCausalLM", "shared attention blocks reused across depths (one KV cache per use); not modeled"},
    {"Lfm2ForCausalLM", "short-convolution layers without a matrix state; not modeled"},
}};

constexpr std::string_view supported_list =
    "BambaForCausalLM, FalconH1ForCausalLM, GraniteMoeHybridForCausalLM, Mamba2ForCausalLM, NemotronHForCausalLM, "
    "Qwen3NextForCausalLM, "
    "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration, "
    "and attention-only Gemma2, Granite, Llama, Mistral, Phi3, Qwen2, Qwen3, Qwen3Moe";

std::vector<layer_spec> read_groups(dom::object top_object, const hf_options& o) {
  const fields probe(top_object, "config.json");
  dom::element archs_e;
  dom::array archs;
  std::string_view arch_view;
  if (top_object.at_key("architectures").get(archs_e) != simdjson::SUCCESS || archs_e.get_array().get(archs) ||
      archs.size() == 0 || archs.at(0).get_string().get(arch_view))
    probe.fail(errc::invalid_argument, "no 'architectures' entry: cannot tell the model family");
  const std::string arch(arch_view);
  for (const unsupported& u : unsupported_archs)
    if (u.arch == arch) throw read_error{errc::unsupported_config, arch + " is not supported: " + std::string(u.why)};

  const fields top(top_object, arch);
  const bool qwen3_5 = arch.starts_with("Qwen3_5");
  // Qwen3.5 nests the language model's fields in text_config.
  fields model = top;
  if (auto text = top.find("text_config")) {
    dom::object to;
    if (text->get_object().get(to) != simdjson::SUCCESS)
      top.fail(errc::invalid_argument, "config.json field 'text_config' must be an object");
    model = fields(to, arch);
  }
  const dtypes d = read_dtypes(top, model, o);
  if (arch == "NemotronHForCausalLM") return nemotron_h(model, o, d);
  if (arch == "Qwen3NextForCausalLM" || qwen3_5) return qwen3_next(model, o, d, qwen3_5);
  if (arch == "FalconH1ForCausalLM") return falcon_h1(model, o, d);
  if (arch == "GraniteMoeHybridForCausalLM") return granite_hybrid(model, o, d);
  if (arch == "BambaForCausalLM") return bamba(model, o, d);
  if (arch == "Mamba2ForCausalLM") return mamba2(model, o, d);
  for (std::string_view a : attention_only_archs)
    if (a == arch) return attention_only(model, o, d);
  throw read_error{errc::unsupported_config,
                   arch + " is not a supported architecture (supported: " + std::string(supported_list) + ")"};
}

hf_reading failed(errc code, std::string message) {
  hf_reading r;
  r.error = code;
  r.message = std::move(message);
  return r;
}

} // namespace

hf_reading read_hf_config(std::string_view json, const hf_options& options) {
  dom::parser parser;
  dom::element doc;
  const simdjson::padded_string padded(json);
  if (auto code = parser.parse(padded).get(doc); code != simdjson::SUCCESS)
    return failed(errc::invalid_argument, std::string("config.json is not valid JSON: ") + simdjson::error_message(code));
  dom::object top;
  if (doc.get_object().get(top) != simdjson::SUCCESS)
    return failed(errc::invalid_argument, "config.json must hold a JSON object");
  std::vector<layer_spec> groups;
  try {
    groups = read_groups(top, options);
  } catch (const read_error& e) {
    return failed(e.code, e.message);
  }
  auto made = model_config::make(std::move(groups));
  if (!made) {
    std::string why = "the layers read from config.json are not a valid model: " + std::string(to_string(made.error()));
    if (made.error() == errc::misaligned)
      why += " (the KV block size " + std::to_string(options.block_size) +
             " and every chunk size must divide the largest of them)";
    else if (made.error() == errc::unsupported_config)
      why += " (a chunk size, conv width or block size without kernels)";
    return failed(made.error(), std::move(why));
  }
  hf_reading r;
  r.config.emplace(std::move(*made));
  return r;
}

hf_reading read_hf_config_file(const std::filesystem::path& path, const hf_options& options) {
  namespace fs = std::filesystem;
  const auto cannot_read = [&] { return failed(errc::invalid_argument, "cannot read " + path.string()); };
  const auto too_large = [&] {
    return failed(errc::invalid_argument, path.string() + " holds more than " +
                                              std::to_string(max_hf_config_bytes >> 20) +
                                              " MiB, far more than any config.json: not reading it");
  };
  // The kind of file first, without opening it: opening a FIFO waits for a writer, reading a device such as
  // /dev/zero never ends.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return cannot_read();
  if (!fs::is_regular_file(status))
    return failed(errc::invalid_argument, path.string() + " is not a regular file (a config.json is one)");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return cannot_read();
  if (size > max_hf_config_bytes) return too_large();
  std::ifstream in(path, std::ios::binary);
  if (!in) return cannot_read();
  // Read in pieces, never past the bound: the path may have been replaced, or the file grown, since its size.
  std::string text;
  text.reserve(static_cast<std::size_t>(size));
  std::array<char, 1 << 16> piece{};
  while (in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    text.append(piece.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_hf_config_bytes) return too_large();
  }
  if (in.bad()) return cannot_read();
  hf_reading r = read_hf_config(text, options);
  if (!r) r.message = path.string() + ": " + r.message;
  return r;
}

} // namespace reprise
