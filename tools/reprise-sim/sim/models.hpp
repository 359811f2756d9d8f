// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Models the simulator knows: the named presets of <reprise/catalog.hpp> (names and parameter counts, the
/// latter for the FLOPs estimate), and models read from a small config file (docs/sim-trace-format.md,
/// "Model files").

#include <reprise/catalog.hpp>
#include <reprise/state/model_config.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace reprise::sim {

/// Which compile-time preset a model is, when it is one.
using preset_id = catalog::preset_id;

struct sim_model {
  std::string name;
  model_config config;
  /// Parameters that run per token (active parameters for mixture-of-experts models). Prefill costs about
  /// 2 * active_params FLOPs per token; the attention-score term is left out, so savings are a lower bound.
  double active_params = 0;
  /// The preset it is, if any.
  std::optional<preset_id> preset;
  /// All parameters, for mixture-of-experts models whose experts do not all run per token (0: dense, the
  /// same as `active_params`). Shown by `reprise-sim models`; not used in any estimate.
  double total_params = 0;

  /// The default model: `nemotron-h-8b`.
  sim_model() : sim_model(of_preset(preset_id::nemotron_h_8b)) {}
  sim_model(std::string n, model_config c, double active, std::optional<preset_id> p = std::nullopt, double total = 0)
      : name(std::move(n)), config(std::move(c)), active_params(active), preset(p), total_params(total) {}
  /// The named preset `p` (catalog.hpp).
  static sim_model of_preset(preset_id p);
};

/// The catalog's presets, in its order.
std::span<const sim_model> preset_models();
/// The preset named `name` (`nemotron-h-8b`, `qwen3-next-80b-a3b`, `falcon-h1-7b`, `llama-3-8b`), or null.
const sim_model* find_preset(std::string_view name);

/// Reads a model file. Format, one `key = value` per line, `#` starts a comment:
///
///     name = jamba-like
///     active_params = 12e9
///     attention = count=4 kv_heads=8 head_dim=128 block_size=16
///     mamba2 = count=28 heads=64 head_dim=64 state_dim=128 groups=1 conv_width=4 chunk=256
///     gated_delta = count=8 key_heads=16 value_heads=32 key_dim=128 value_dim=128 conv_width=4 chunk=64
///
/// Returns the model, or a message naming the line and what is wrong.
std::variant<sim_model, std::string> parse_model_file(std::string_view text);

/// The same model with every attention layer's block size set to `block_size` (for block-size sweeps).
/// Errors as `model_config::make` (e.g. `misaligned` when the block size does not divide the chunk grid).
result<model_config> with_block_size(const model_config& m, std::uint32_t block_size);

/// "97.4 MiB", "40 GiB", "512 B".
std::string format_bytes(double bytes);
/// Parses "40GiB", "512 MiB", "1.5G", "1048576" (suffixes K/M/G/T and KiB..TiB are powers of 1024).
std::optional<std::uint64_t> parse_bytes(std::string_view text);

} // namespace reprise::sim
