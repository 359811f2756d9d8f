// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Element types of states and activations, as runtime tags usable in constant expressions.

#include <reprise/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace reprise {

/// Element type of a state buffer or activation. A tag, not a C++ type, so that shapes stay structural
/// aggregates (usable as template arguments) and runtime configs can carry it. Values are stable (they are part
/// of the content-key format): new types are appended. `f8_e4m3` and `f8_e5m2` are the FP8 KV caches engines
/// keep (one byte per element); Reprise sizes them, it never computes in them.
enum class dtype : std::uint8_t { f32, bf16, f16, f64, f8_e4m3, f8_e5m2 };

/// Bytes per element of `t`; 0 for a value outside the enumeration (see `is_valid`).
constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
  case dtype::f32: return 4;
  case dtype::bf16: return 2;
  case dtype::f16: return 2;
  case dtype::f64: return 8;
  case dtype::f8_e4m3: return 1;
  case dtype::f8_e5m2: return 1;
  }
  return 0;
}

/// True for the enumerators above. A `dtype` read from a file or cast from an integer may be none of them;
/// shapes refuse such a value instead of sizing a state at 0 bytes.
constexpr bool is_valid(dtype t) noexcept { return size_of(t) != 0; }

constexpr std::string_view to_string(dtype t) noexcept {
  switch (t) {
  case dtype::f32: return "f32";
  case dtype::bf16: return "bf16";
  case dtype::f16: return "f16";
  case dtype::f64: return "f64";
  case dtype::f8_e4m3: return "f8_e4m3";
  case dtype::f8_e5m2: return "f8_e5m2";
  }
  return "?";
}

/// The dtype named `name`: Reprise's own names (`f32`, `bf16`, `f16`, `f64`, `f8_e4m3`, `f8_e5m2`) and the
/// spellings of Hugging Face configs and PyTorch (`float32`, `bfloat16`, `float16`, `float64`, `float8_e4m3fn`,
/// `fp8_e4m3`, `fp8_e5m2`, ..., with or without a `torch.` prefix). `fp8` alone is e4m3, the KV-cache format
/// of vLLM and TensorRT-LLM. False for anything else (`out` unchanged).
constexpr bool parse_dtype(std::string_view name, dtype& out) noexcept {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  struct entry {
    std::string_view name;
    dtype type;
  };
  constexpr entry names[] = {
      {"f32", dtype::f32},         {"float32", dtype::f32},       {"float", dtype::f32},
      {"bf16", dtype::bf16},       {"bfloat16", dtype::bf16},     {"f16", dtype::f16},
      {"float16", dtype::f16},     {"half", dtype::f16},          {"fp16", dtype::f16},
      {"f64", dtype::f64},         {"float64", dtype::f64},       {"double", dtype::f64},
      {"f8_e4m3", dtype::f8_e4m3}, {"fp8", dtype::f8_e4m3},       {"fp8_e4m3", dtype::f8_e4m3},
      {"float8_e4m3fn", dtype::f8_e4m3}, {"float8_e4m3", dtype::f8_e4m3}, {"f8_e5m2", dtype::f8_e5m2},
      {"fp8_e5m2", dtype::f8_e5m2}, {"float8_e5m2", dtype::f8_e5m2},
  };
  for (const entry& e : names)
    if (e.name == name) {
      out = e.type;
      return true;
    }
  return false;
}

} // namespace reprise
