// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `read_hf_config`: a `model_config` from a Hugging Face `config.json` (a path or the JSON text), for engines
/// that learn layer sizes from a checkpoint. The Python package's `ModelConfig.from_hf_config` calls this very
/// reader, so C++ and Python engines get the same answer.
///
/// Strict like transformers: a field the config omits takes the default of transformers' config class for
/// that architecture (Nemotron-H's `chunk_size` 128, Qwen3-Next's `head_dim` 256, ...), never a guess; a value
/// that is inconsistent (an attention head dim that does not divide, Falcon-H1's `mamba_d_ssm` against heads x
/// head dim, an unknown layer kind) is an error whose message names the field. Only the stateful layers matter:
/// attention layers (KV heads, head dim) and recurrent layers (Mamba2, gated delta); MLP and MoE layers are
/// skipped.
///
/// Dtypes come from the config with an override (`hf_options`): the KV cache's from a quantized KV cache
/// (`quantization_config`: compressed-tensors' `kv_cache_scheme`, ModelOpt's `kv_cache_quant_algo`: FP8 e4m3)
/// or else `torch_dtype` / `dtype`; the conv window's from `torch_dtype` / `dtype` (the model's activations);
/// the SSM / delta-rule state's from `mamba_ssm_cache_dtype`, else fp32.
///
/// Part of the opt-in target `reprise::hf_config` (a compiled library over simdjson); not included by
/// <reprise/reprise.hpp>.

#include <reprise/dtype.hpp>
#include <reprise/errc.hpp>
#include <reprise/state/model_config.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace reprise {

/// What the engine decides, not the checkpoint.
struct hf_options {
  std::uint32_t block_size = 16;     ///< the engine's KV block size (tokens)
  std::optional<dtype> kv_dtype{};   ///< overrides the KV cache dtype the config implies
  std::optional<dtype> state_dtype{}; ///< overrides the SSM / delta-rule state dtype (default fp32)
  std::optional<dtype> conv_dtype{}; ///< overrides the conv window dtype (default: the model's dtype)
};

/// A config read: the validated `model_config`, or the error and a message that names the field.
struct hf_reading {
  std::optional<model_config> config;
  errc error{};        ///< `errc{}` on success
  std::string message; ///< on failure: what is wrong, naming the architecture and the field

  explicit operator bool() const noexcept { return config.has_value(); }
};

/// Reads the stateful layers of a `config.json` text.
///
/// Supported: Nemotron-H (`hybrid_override_pattern` or `layers_block_type`), Qwen3-Next and Qwen3.5 (fields
/// at the top or in `text_config`), Falcon-H1, Granite-4.0-H (GraniteMoeHybrid), Bamba, and attention-only
/// Llama-like models. Errors: `invalid_argument` (not JSON, no `architectures`, a missing or malformed field,
/// inconsistent sizes, an unknown layer kind, an unknown dtype name), `unsupported_config` (an architecture
/// Reprise cannot cache, such as Mamba-1 layers, or an unsupported KV-cache quantization), and every error of
/// `model_config::make` (a chunk or block size without kernels, misaligned sizes). Throws only `std::bad_alloc`.
/// Complexity: linear in the size of the text.
hf_reading read_hf_config(std::string_view json, const hf_options& options = {});

/// The largest file `read_hf_config_file` reads. A real config.json is a few KiB (tens of KiB with per-layer
/// lists or a quantization config that names its ignored modules); the bound, a thousand times that, only keeps
/// a wrong path (a checkpoint shard, a log, a device) from being read into memory whole.
inline constexpr std::uintmax_t max_hf_config_bytes = std::uintmax_t{16} << 20;

/// Reads a `config.json` file (a symbolic link to one, as in the Hugging Face cache, is followed).
/// Errors: those of `read_hf_config`, after the path; `invalid_argument` naming the path when it cannot be read,
/// is not a regular file (a directory, a device such as /dev/zero, a FIFO: never opened, so never read without
/// end or waited on) or holds more than `max_hf_config_bytes` (refused before reading, and when it grows past
/// them while read). Throws only `std::bad_alloc`. Complexity: linear in the size of the file.
hf_reading read_hf_config_file(const std::filesystem::path& path, const hf_options& options = {});

} // namespace reprise
