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
/// aggregates (usable as template arguments) and runtime configs can carry it.
enum class dtype : std::uint8_t { f32, bf16, f16, f64 };

/// Bytes per element of `t`; 0 for a value outside the enumeration (see `is_valid`).
constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
  case dtype::f32: return 4;
  case dtype::bf16: return 2;
  case dtype::f16: return 2;
  case dtype::f64: return 8;
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
  }
  return "?";
}

} // namespace reprise
