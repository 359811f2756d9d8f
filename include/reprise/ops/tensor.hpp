// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Tensor views and element types shared by the host implementations and the CUDA kernels.
///
/// A view is a `cuda::std::mdspan` (CCCL libcudacxx, plain C++ that g++ compiles too) over row-major
/// memory with 64-bit extents: the same view type describes a host buffer in a host test and a device
/// buffer handed to a launcher, and the kernels index it with the same expressions as the host code.
/// `bfloat16` and `float16` are storage types, bit-compatible with CUDA's `__nv_bfloat16` and `__half`, whose
/// conversions are plain integer arithmetic so host and device round identically (to nearest, ties to even).
/// fp32 is the state type of every prefill-exact snapshot; bf16 and fp16 state pools serve lossy
/// `decode_continuation` states (`state_element`).

#include <reprise/config.hpp>
#include <reprise/dtype.hpp>

#include <cuda/std/bit>
#include <cuda/std/mdspan>
#include <cuda/std/type_traits>

#include <cstddef>
#include <cstdint>

namespace reprise::ops {

/// Row-major view of rank `Rank` over elements `T` (use `const T` for inputs). A view whose data pointer
/// is null and whose extents are zero means "absent" for optional operands (D, z, dt bias, conv bias).
template <class T, std::size_t Rank>
using tensor = cuda::std::mdspan<T, cuda::std::dextents<std::int64_t, Rank>>;

/// A row-major view of `data` with the given extents: `make_tensor(ptr, tokens, heads, head_dim)`.
template <class T, class... Extents>
REPRISE_HOST_DEVICE constexpr tensor<T, sizeof...(Extents)> make_tensor(T* data, Extents... extents) noexcept {
  return tensor<T, sizeof...(Extents)>(data, static_cast<std::int64_t>(extents)...);
}

/// True when an optional operand was not given.
template <class View>
REPRISE_HOST_DEVICE constexpr bool is_absent(const View& t) noexcept {
  return t.data_handle() == nullptr;
}

/// Brain float: the upper 16 bits of an IEEE binary32. Layout-compatible with `__nv_bfloat16`.
struct bfloat16 {
  std::uint16_t bits;
  friend constexpr bool operator==(bfloat16, bfloat16) = default; ///< bitwise (a NaN equals itself)
};
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);

/// IEEE 754 binary16 storage (1 sign, 5 exponent, 10 mantissa bits; largest finite 65504).
struct float16 {
  std::uint16_t bits;
  friend constexpr bool operator==(float16, float16) = default; ///< bitwise (a NaN equals itself)
};
static_assert(sizeof(float16) == 2 && alignof(float16) == 2);

/// Widens `v` exactly.
REPRISE_HOST_DEVICE constexpr float to_float(float v) noexcept { return v; }
REPRISE_HOST_DEVICE constexpr float to_float(bfloat16 v) noexcept {
  return cuda::std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16);
}
/// Exact: every binary16 value is a float.
REPRISE_HOST_DEVICE constexpr float to_float(float16 v) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(v.bits & 0x8000u) << 16;
  const std::uint32_t e = (v.bits >> 10) & 0x1fu, mant = v.bits & 0x3ffu;
  if (e == 0) { // zero or subnormal: mant x 2^-24, exact in fp32
    const float m = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign != 0 ? -m : m;
  }
  if (e == 0x1f) return cuda::std::bit_cast<float>(sign | 0x7f800000u | (mant << 13)); // inf, NaN (payload kept)
  return cuda::std::bit_cast<float>(sign | ((e + 112u) << 23) | (mant << 13));
}

/// Narrows `v` to `T` with round-to-nearest-even (NaN stays a quiet NaN), the rounding of
/// `__float2bfloat16_rn`, so a state rounded on the host equals one rounded on the device.
template <class T>
REPRISE_HOST_DEVICE constexpr T from_float(float v) noexcept {
  if constexpr (cuda::std::is_same_v<T, float>) {
    return v;
  } else if constexpr (cuda::std::is_same_v<T, float16>) {
    const std::uint32_t u = cuda::std::bit_cast<std::uint32_t>(v);
    const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) // NaN: quiet, top payload bits kept
      return float16{static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
    if (a >= 0x477ff000u) return float16{static_cast<std::uint16_t>(sign | 0x7c00u)}; // >= 65520 rounds to inf
    if (a < 0x38800000u) { // below 2^-14: a subnormal (or zero) result, round(|v| x 2^24)
      const std::uint32_t shift = 126u - (a >> 23); // |v| x 2^24 = mant >> shift, mant with its implicit 1
      if (shift > 24u) return float16{sign}; // |v| < 2^-25: rounds to zero
      const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
      std::uint32_t m = mant >> shift;
      const std::uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (m & 1u) != 0)) ++m; // may carry into the smallest normal: still right
      return float16{static_cast<std::uint16_t>(sign | m)};
    }
    std::uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
    const std::uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0)) ++h; // a carry moves into the exponent correctly
    return float16{static_cast<std::uint16_t>(sign | h)};
  } else {
    static_assert(cuda::std::is_same_v<T, bfloat16>,
                  "from_float: element type must be float, bfloat16 or float16");
    const std::uint32_t u = cuda::std::bit_cast<std::uint32_t>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
    const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return bfloat16{static_cast<std::uint16_t>(rounded >> 16)};
  }
}

/// The `dtype` tag of an element type the kernels accept.
template <class T>
inline constexpr dtype dtype_of = cuda::std::is_same_v<T, float>      ? dtype::f32
                                  : cuda::std::is_same_v<T, float16> ? dtype::f16
                                                                     : dtype::bf16;

/// Element types of activations (x, dt, B, C, z, y, conv inputs and windows) the kernels are built for.
template <class T>
concept activation_element = cuda::std::is_same_v<T, float> || cuda::std::is_same_v<T, bfloat16>;

/// Element types of a state pool: fp32 (the default; the only type whose captures are prefill-exact), or
/// bf16 / fp16 for lossy decode-continuation states (read as fp32, advanced in fp32, rounded once on store).
template <class T>
concept state_element = activation_element<T> || cuda::std::is_same_v<T, float16>;

} // namespace reprise::ops
