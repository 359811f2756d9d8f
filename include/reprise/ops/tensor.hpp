// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Tensor views and element types shared by the host implementations and the CUDA kernels.
///
/// A view is a `cuda::std::mdspan` (CCCL libcudacxx, plain C++ that g++ compiles too) over row-major
/// memory with 64-bit extents: the same view type describes a host buffer in a host test and a device
/// buffer handed to a launcher, and the kernels index it with the same expressions as the host code.
/// `bfloat16` is a storage type, bit-compatible with CUDA's `__nv_bfloat16`, whose conversions are plain
/// integer arithmetic so host and device round identically.

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

/// Widens `v` exactly.
REPRISE_HOST_DEVICE constexpr float to_float(float v) noexcept { return v; }
REPRISE_HOST_DEVICE constexpr float to_float(bfloat16 v) noexcept {
  return cuda::std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16);
}

/// Narrows `v` to `T` with round-to-nearest-even (NaN stays a quiet NaN), the rounding of
/// `__float2bfloat16_rn`, so a state rounded on the host equals one rounded on the device.
template <class T>
REPRISE_HOST_DEVICE constexpr T from_float(float v) noexcept {
  if constexpr (cuda::std::is_same_v<T, float>) {
    return v;
  } else {
    static_assert(cuda::std::is_same_v<T, bfloat16>, "from_float: element type must be float or bfloat16");
    const std::uint32_t u = cuda::std::bit_cast<std::uint32_t>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
    const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return bfloat16{static_cast<std::uint16_t>(rounded >> 16)};
  }
}

/// The `dtype` tag of an element type the kernels accept.
template <class T>
inline constexpr dtype dtype_of = cuda::std::is_same_v<T, float> ? dtype::f32 : dtype::bf16;

/// Element types of activations (x, dt, B, C, z, y, conv inputs and windows) the kernels are built for.
template <class T>
concept activation_element = cuda::std::is_same_v<T, float> || cuda::std::is_same_v<T, bfloat16>;

} // namespace reprise::ops
