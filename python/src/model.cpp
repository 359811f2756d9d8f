// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// Layer shapes and `ModelConfig` (reprise::model_config): the runtime model description a cache is built
/// from. Validation is the C++ one (model_facts), so byte figures and alignment rules cannot drift from the
/// library. `ModelConfig.from_hf_config` is the C++ config.json reader (reprise::read_hf_config), so Python
/// and C++ engines read a checkpoint alike.

#include "bindings.hpp"

#include <reprise/catalog.hpp>
#include <reprise/state/hf_config.hpp>
#include <reprise/state/model_config.hpp>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <variant>
#include <vector>

namespace reprise::python {
namespace {

dtype parse_dtype(const std::string& s) {
  dtype t{};
  if (reprise::parse_dtype(s, t)) return t;
  throw nb::value_error(("unknown dtype '" + s + "': use f32, bf16, f16, f64, f8_e4m3 or f8_e5m2 (or the "
                         "float32 / bfloat16 / float16 / float8_e4m3fn / float8_e5m2 spellings)")
                            .c_str());
}
std::optional<dtype> parse_optional_dtype(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  return parse_dtype(*s);
}

/// `ModelConfig.from_hf_config`: a dict (serialized with the json module) or a path to a config.json file.
model_config from_hf_config(nb::handle config, std::uint32_t block_size, const std::optional<std::string>& kv_dtype,
                            const std::optional<std::string>& state_dtype, const std::optional<std::string>& conv_dtype) {
  const hf_options o{.block_size = block_size,
                     .kv_dtype = parse_optional_dtype(kv_dtype),
                     .state_dtype = parse_optional_dtype(state_dtype),
                     .conv_dtype = parse_optional_dtype(conv_dtype)};
  hf_reading r;
  if (nb::isinstance<nb::dict>(config)) {
    const nb::object text = nb::module_::import_("json").attr("dumps")(config);
    r = read_hf_config(nb::cast<std::string>(text), o);
  } else if (nb::isinstance<nb::str>(config) || nb::hasattr(config, "__fspath__")) {
    r = read_hf_config_file(nb::cast<std::filesystem::path>(nb::module_::import_("os").attr("fspath")(config)), o);
  } else {
    throw nb::type_error("from_hf_config: pass the parsed config.json as a dict, or the path of a config.json file");
  }
  if (!r) raise_message(r.error, "from_hf_config: " + r.message);
  return std::move(*r.config);
}
std::string name_of(dtype t) { return std::string(to_string(t)); }

using shape_variant = std::variant<kv_shape, mamba2_shape, gated_delta_shape>;

model_config make_config(const std::vector<std::tuple<nb::object, std::uint32_t>>& groups) {
  std::vector<layer_spec> specs;
  specs.reserve(groups.size());
  for (const auto& [shape, count] : groups) {
    layer_spec g;
    g.count = count;
    if (nb::isinstance<kv_shape>(shape)) g.shape = nb::cast<kv_shape>(shape);
    else if (nb::isinstance<mamba2_shape>(shape)) g.shape = nb::cast<mamba2_shape>(shape);
    else if (nb::isinstance<gated_delta_shape>(shape)) g.shape = nb::cast<gated_delta_shape>(shape);
    else throw nb::type_error("ModelConfig: each group is (KvShape | Mamba2Shape | GatedDeltaShape, count)");
    specs.push_back(g);
  }
  // The model rule broken, with its words (hybrid_model's static_assert text).
  if (const model_facts f = model_config::facts_of(specs); f.error != model_error::none)
    raise_message(f.to_errc(), "ModelConfig: " + std::string(to_string(f.error)) + " (" +
                                   std::string(to_string(f.to_errc())) + "): " + std::string(rule_message(f.error)));
  return value_or_raise(model_config::make(std::move(specs)), "ModelConfig");
}

/// `ModelConfig.preset`: a preset of the catalog shared with reprise-sim (`nemotron-h-8b`), or, deprecated
/// (a DeprecationWarning), the name of its C++ type (`nemotron_h_8b`), which this module took before.
model_config preset(const std::string& name) {
  if (const auto id = catalog::find_preset(name)) return catalog::config_of(*id);
  std::string names;
  for (std::size_t i = 0; i < catalog::preset_table.size(); ++i) {
    const catalog::preset_entry& p = catalog::preset_table[i];
    if (name == p.type_name) {
      const std::string warning =
          "ModelConfig.preset('" + name + "') is deprecated, use '" + std::string(p.name) + "' (the same model)";
      if (PyErr_WarnEx(PyExc_DeprecationWarning, warning.c_str(), 2) != 0) throw nb::python_error();
      return catalog::config_of(static_cast<catalog::preset_id>(i));
    }
    names += (names.empty() ? "'" : ", '") + std::string(p.name) + "'";
  }
  throw nb::value_error(("unknown preset '" + name + "': " + names).c_str());
}

nb::list groups_of(const model_config& c) {
  nb::list out;
  for (const layer_spec& g : c.groups())
    std::visit([&](const auto& s) { out.append(nb::make_tuple(nb::cast(s), g.count)); }, g.shape);
  return out;
}

/// The docstring of `ModelConfig.preset`, listing the catalog's presets.
std::string preset_docstring() {
  std::string s = "The layout of a public model the C++ library ships as a preset (16-token KV blocks): ";
  for (const catalog::preset_entry& p : catalog::preset_table)
    s.append("'").append(p.name).append("' (").append(p.checkpoint).append("), ");
  return s + "the names reprise-sim takes (reprise.preset_names()). The names of the C++ preset types "
             "('nemotron_h_8b', ...) still work, deprecated (a DeprecationWarning).";
}

std::string repr(const model_config& c) {
  return "ModelConfig(attention_layers=" + std::to_string(c.attention_layers()) +
         ", mamba2_layers=" + std::to_string(c.facts().mamba2_layers) +
         ", gated_delta_layers=" + std::to_string(c.facts().gated_delta_layers) +
         ", block_size=" + std::to_string(c.block_size()) + ", alignment=" + std::to_string(c.alignment()) +
         ", bytes_per_kv_block=" + std::to_string(c.bytes_per_kv_block()) +
         ", bytes_per_snapshot=" + std::to_string(c.bytes_per_snapshot()) + ")";
}

} // namespace

void bind_model(nb::module_& m) {
  static const std::string preset_doc = preset_docstring();
  m.def(
      "preset_names", [] { return names_of(catalog::preset_table); },
      "The names ModelConfig.preset takes, in the catalog's order (reprise::catalog::preset_table, the names "
      "reprise-sim's --model takes).");
  nb::class_<kv_shape>(m, "KvShape",
                       "Attention KV cache of one layer: K and V for `kv_heads` heads of `head_dim`, in blocks "
                       "of `block_size` tokens (one of 8, 16, 32, 64, 128, 256 for a cache).")
      .def(
          "__init__",
          [](kv_shape* self, std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t block_size,
             const std::string& dt) { new (self) kv_shape{kv_heads, head_dim, block_size, parse_dtype(dt)}; },
          nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("block_size") = 16, nb::arg("dtype") = "bf16")
      .def_ro("kv_heads", &kv_shape::kv_heads, "KV heads.")
      .def_ro("head_dim", &kv_shape::head_dim, "Elements per head.")
      .def_ro("block_size", &kv_shape::block_size, "Tokens per KV block.")
      .def_prop_ro("dtype", [](const kv_shape& s) { return name_of(s.type); }, "Element type of K and V.")
      .def_prop_ro("bytes_per_token", &kv_shape::bytes_per_token, "Bytes one token occupies in this layer (K and V).")
      .def_prop_ro("bytes_per_block", &kv_shape::bytes_per_block, "Bytes of one block of this layer.")
      .def("__eq__", [](const kv_shape& a, const kv_shape& b) { return a == b; }, "Field-wise equality.")
      .def("__repr__", [](const kv_shape& s) {
        return "KvShape(kv_heads=" + std::to_string(s.kv_heads) + ", head_dim=" + std::to_string(s.head_dim) +
               ", block_size=" + std::to_string(s.block_size) + ", dtype='" + name_of(s.type) + "')";
      });

  nb::class_<mamba2_shape>(m, "Mamba2Shape",
                           "Mamba2 mixer state of one layer: a causal-conv window over x, B and C "
                           "(`conv_width` - 1 rows) and an SSM state [heads, head_dim, state_dim]. `chunk` is "
                           "the chunked-prefill size Q (64, 128 or 256).")
      .def(
          "__init__",
          [](mamba2_shape* self, std::uint32_t heads, std::uint32_t head_dim, std::uint32_t state_dim,
             std::uint32_t groups, std::uint32_t conv_width, std::uint32_t chunk, const std::string& state_dtype,
             const std::string& conv_dtype) {
            new (self) mamba2_shape{heads, head_dim, state_dim, groups, conv_width, chunk, parse_dtype(state_dtype),
                                    parse_dtype(conv_dtype)};
          },
          nb::arg("heads"), nb::arg("head_dim"), nb::arg("state_dim"), nb::arg("groups") = 1,
          nb::arg("conv_width") = 4, nb::arg("chunk") = 256, nb::arg("state_dtype") = "f32",
          nb::arg("conv_dtype") = "bf16")
      .def_ro("heads", &mamba2_shape::heads, "SSM heads H.")
      .def_ro("head_dim", &mamba2_shape::head_dim, "Head dimension P.")
      .def_ro("state_dim", &mamba2_shape::state_dim, "State dimension N.")
      .def_ro("groups", &mamba2_shape::groups, "B/C groups G.")
      .def_ro("conv_width", &mamba2_shape::conv_width, "Causal conv width W.")
      .def_ro("chunk", &mamba2_shape::chunk, "Chunked-prefill size Q.")
      .def_prop_ro("state_dtype", [](const mamba2_shape& s) { return name_of(s.state_type); }, "SSM state type.")
      .def_prop_ro("conv_dtype", [](const mamba2_shape& s) { return name_of(s.conv_type); }, "Conv window type.")
      .def_prop_ro("conv_channels", &mamba2_shape::conv_channels, "Channels through the conv: H*P + 2*G*N.")
      .def_prop_ro("conv_state_bytes", &mamba2_shape::conv_state_bytes, "Bytes of the conv window.")
      .def_prop_ro("matrix_state_bytes", &mamba2_shape::matrix_state_bytes, "Bytes of the SSM state.")
      .def_prop_ro("state_bytes", &mamba2_shape::state_bytes, "Bytes of one layer's snapshot.")
      .def("__eq__", [](const mamba2_shape& a, const mamba2_shape& b) { return a == b; }, "Field-wise equality.")
      .def("__repr__", [](const mamba2_shape& s) {
        return "Mamba2Shape(heads=" + std::to_string(s.heads) + ", head_dim=" + std::to_string(s.head_dim) +
               ", state_dim=" + std::to_string(s.state_dim) + ", groups=" + std::to_string(s.groups) +
               ", conv_width=" + std::to_string(s.conv_width) + ", chunk=" + std::to_string(s.chunk) + ")";
      });

  nb::class_<gated_delta_shape>(m, "GatedDeltaShape",
                                "Gated delta rule state of one layer (Qwen3-Next linear attention): a "
                                "causal-conv window over q, k, v and a matrix [value_heads, key_dim, value_dim]. "
                                "`chunk` is the chunked-prefill size Q (64; 32 for small shapes).")
      .def(
          "__init__",
          [](gated_delta_shape* self, std::uint32_t key_heads, std::uint32_t value_heads, std::uint32_t key_dim,
             std::uint32_t value_dim, std::uint32_t conv_width, std::uint32_t chunk, const std::string& state_dtype,
             const std::string& conv_dtype) {
            new (self) gated_delta_shape{key_heads,  value_heads, key_dim, value_dim, conv_width,
                                         chunk,      parse_dtype(state_dtype), parse_dtype(conv_dtype)};
          },
          nb::arg("key_heads"), nb::arg("value_heads"), nb::arg("key_dim"), nb::arg("value_dim"),
          nb::arg("conv_width") = 4, nb::arg("chunk") = 64, nb::arg("state_dtype") = "f32",
          nb::arg("conv_dtype") = "bf16")
      .def_ro("key_heads", &gated_delta_shape::key_heads, "Key heads H.")
      .def_ro("value_heads", &gated_delta_shape::value_heads, "Value heads HV (a multiple of H).")
      .def_ro("key_dim", &gated_delta_shape::key_dim, "Key dimension K.")
      .def_ro("value_dim", &gated_delta_shape::value_dim, "Value dimension V.")
      .def_ro("conv_width", &gated_delta_shape::conv_width, "Causal conv width W.")
      .def_ro("chunk", &gated_delta_shape::chunk, "Chunked-prefill size Q.")
      .def_prop_ro("state_dtype", [](const gated_delta_shape& s) { return name_of(s.state_type); }, "State type.")
      .def_prop_ro("conv_dtype", [](const gated_delta_shape& s) { return name_of(s.conv_type); }, "Conv window type.")
      .def_prop_ro("conv_channels", &gated_delta_shape::conv_channels, "Channels through the conv: 2*H*K + HV*V.")
      .def_prop_ro("conv_state_bytes", &gated_delta_shape::conv_state_bytes, "Bytes of the conv window.")
      .def_prop_ro("matrix_state_bytes", &gated_delta_shape::matrix_state_bytes, "Bytes of the delta-rule matrix.")
      .def_prop_ro("state_bytes", &gated_delta_shape::state_bytes, "Bytes of one layer's snapshot.")
      .def("__eq__", [](const gated_delta_shape& a, const gated_delta_shape& b) { return a == b; },
           "Field-wise equality.")
      .def("__repr__", [](const gated_delta_shape& s) {
        return "GatedDeltaShape(key_heads=" + std::to_string(s.key_heads) +
               ", value_heads=" + std::to_string(s.value_heads) + ", key_dim=" + std::to_string(s.key_dim) +
               ", value_dim=" + std::to_string(s.value_dim) + ", conv_width=" + std::to_string(s.conv_width) +
               ", chunk=" + std::to_string(s.chunk) + ")";
      });

  nb::class_<model_config>(m, "ModelConfig",
                           "A validated model description: the layer groups of a checkpoint and the facts a cache "
                           "needs (bytes per KV block and per snapshot, the snapshot alignment unit).")
      .def(
          "__init__",
          [](model_config* self, const std::vector<std::tuple<nb::object, std::uint32_t>>& groups) {
            new (self) model_config(make_config(groups));
          },
          nb::arg("groups"),
          "Validates `groups`, a list of (KvShape | Mamba2Shape | GatedDeltaShape, count). Raises InvalidArgument "
          "(no layers, a count of 0, attention layers with different block sizes), UnsupportedConfig (a shape "
          "the kernels do not support) or Misaligned (a block or chunk size that does not divide the largest).")
      .def_static("preset", &preset, nb::arg("name"), preset_doc.c_str())
      .def_static("from_hf_config", &from_hf_config, nb::arg("config"), nb::arg("block_size") = 16, nb::kw_only(),
                  nb::arg("kv_dtype") = nb::none(), nb::arg("state_dtype") = nb::none(),
                  nb::arg("conv_dtype") = nb::none(),
          "Reads the layer layout of a Hugging Face config.json (a parsed dict or the file's path) with the C++ "
          "reader (reprise::read_hf_config), strict like transformers: Nemotron-H, Qwen3-Next / Qwen3.5, "
          "Falcon-H1, Granite-4.0-H, Bamba, and attention-only Llama-like models. A field the config omits takes "
          "the default of transformers' config class for that architecture. `block_size` is the KV block size of "
          "the engine (8, 16, 32, 64, 128 or 256). Dtypes come from the config (KV and conv window: torch_dtype, "
          "or FP8 e4m3 for a quantized KV cache; SSM state: mamba_ssm_cache_dtype, else f32); `kv_dtype`, "
          "`state_dtype` and `conv_dtype` override them (e.g. kv_dtype='f8_e4m3' for an FP8 KV cache, "
          "conv_dtype='f32' for an engine that keeps fp32 conv windows). Raises InvalidArgument (a ValueError) "
          "naming the field that is missing, malformed or inconsistent (an attention head dim that does not "
          "divide, Falcon-H1's mamba_d_ssm against heads x head dim), UnsupportedConfig naming the architecture "
          "Reprise cannot cache (e.g. Mamba-1 layers), and the errors of ModelConfig(groups). A path must name a "
          "regular file (a symbolic link to one is followed) of at most 16 MiB: a directory, a device such as "
          "/dev/zero, a FIFO or a larger file raises InvalidArgument naming the path, unread.")
      .def_prop_ro("groups", &groups_of, "The layer groups: a list of (shape, count).")
      .def_prop_ro("block_size", &model_config::block_size,
                   "Tokens per KV block (per key block, one chunk, without attention layers).")
      .def_prop_ro("alignment", &model_config::alignment,
                   "Snapshots sit at multiples of this unit: lcm(block size, every chunk size).")
      .def_prop_ro("bytes_per_kv_block", &model_config::bytes_per_kv_block,
                   "Bytes one block id covers over every attention layer.")
      .def_prop_ro("bytes_per_snapshot", &model_config::bytes_per_snapshot,
                   "Bytes of one snapshot: conv window and matrix state of every recurrent layer.")
      .def_prop_ro("attention_layers", &model_config::attention_layers, "Attention layers.")
      .def_prop_ro("mamba2_layers", [](const model_config& c) { return c.facts().mamba2_layers; }, "Mamba2 layers.")
      .def_prop_ro("gated_delta_layers", [](const model_config& c) { return c.facts().gated_delta_layers; },
                   "Gated-delta layers.")
      .def_prop_ro("recurrent_layers", &model_config::recurrent_layers, "Mamba2 plus gated-delta layers.")
      .def_prop_ro("has_recurrent", &model_config::has_recurrent, "Whether any recurrent layer exists.")
      .def("__repr__", &repr);
}

} // namespace reprise::python
