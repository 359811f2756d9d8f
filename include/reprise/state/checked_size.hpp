// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `checked_size`: a `std::size_t` that remembers whether any product or sum leading to it overflowed, and
/// `gcd` / `lcm` on unsigned integers. Both are `constexpr` under every compiler Reprise supports, nvcc's
/// host front end included (`std::lcm` is not usable in its constant expressions).
///
/// Byte counts of a state are products of up to five 32-bit sizes; a shape read from a checkpoint's config
/// may hold any value, so every byte figure is computed through this type and an overflow is reported
/// (`errc::out_of_range`) rather than wrapped into a small or zero size.

#include <reprise/config.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace reprise::detail {

/// A size computed with overflow checks. Once overflowed it stays overflowed; `value()` is then
/// `std::numeric_limits<std::size_t>::max()`, never a wrapped count.
class checked_size {
public:
  constexpr checked_size() noexcept = default;
  constexpr checked_size(std::size_t v) noexcept : value_(v) {}
  template <std::unsigned_integral U>
    requires(!std::same_as<U, std::size_t> && !std::same_as<U, bool>)
  constexpr checked_size(U v) noexcept {
    if constexpr (sizeof(U) > sizeof(std::size_t)) {
      if (v > std::numeric_limits<std::size_t>::max()) {
        overflow_ = true;
        value_ = std::numeric_limits<std::size_t>::max();
        return;
      }
    }
    value_ = static_cast<std::size_t>(v);
  }

  constexpr bool overflowed() const noexcept { return overflow_; }
  constexpr std::size_t value() const noexcept { return value_; }

  friend constexpr checked_size operator*(checked_size a, checked_size b) noexcept {
    if (a.overflow_ || b.overflow_) return overflow();
    if (a.value_ != 0 && b.value_ > std::numeric_limits<std::size_t>::max() / a.value_) return overflow();
    return checked_size{a.value_ * b.value_};
  }
  friend constexpr checked_size operator+(checked_size a, checked_size b) noexcept {
    if (a.overflow_ || b.overflow_) return overflow();
    if (b.value_ > std::numeric_limits<std::size_t>::max() - a.value_) return overflow();
    return checked_size{a.value_ + b.value_};
  }

private:
  static constexpr checked_size overflow() noexcept {
    checked_size r{std::numeric_limits<std::size_t>::max()};
    r.overflow_ = true;
    return r;
  }

  std::size_t value_ = 0;
  bool overflow_ = false;
};

/// Greatest common divisor; `gcd(a, 0) == a`.
/// Complexity: O(log min(a, b)).
constexpr std::uint64_t gcd(std::uint64_t a, std::uint64_t b) noexcept {
  while (b != 0) {
    const std::uint64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

/// Least common multiple; 0 when either argument is 0. Precondition: the result fits in 64 bits (it does
/// for any two 32-bit arguments).
constexpr std::uint64_t lcm(std::uint64_t a, std::uint64_t b) noexcept {
  if (a == 0 || b == 0) return 0;
  return a / gcd(a, b) * b;
}

static_assert(gcd(256, 16) == 16 && lcm(528, 256) == 8448 && lcm(0, 5) == 0);
static_assert((checked_size{std::uint32_t{0xffffffff}} * std::uint32_t{0xffffffff} * std::size_t{2}).overflowed());
static_assert(!(checked_size{std::uint32_t{0xffffffff}} * std::uint32_t{0xffffffff}).overflowed());

} // namespace reprise::detail
