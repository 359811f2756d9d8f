// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Error codes and the expected-like `result<T>` that every fallible Reprise call returns.
///
/// Hot-path calls never throw: a call that fails returns an `errc` and leaves the cache exactly as it was.
/// `errc` plugs into `std::error_code` so engines can log it with their own error plumbing.

#include <reprise/config.hpp>

#include <cstdint>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <new>
#include <utility>

namespace reprise {

/// Every error a Reprise call can report. Values are stable: engines may persist or export them.
enum class errc : std::uint8_t {
  invalid_argument = 1,   ///< a size, count or option is out of its documented range
  size_mismatch = 2,      ///< a buffer or token span has the wrong length for the call
  misaligned = 3,         ///< a position or interval off its grid (alignment unit; chat capture offsets: block size)
  unsupported_config = 4, ///< no kernel instantiation / model shape matches, or policy and model do not fit
  pool_exhausted = 5,     ///< every block or slot is referenced; nothing was allocated
  budget_too_small = 6,   ///< a byte budget cannot hold even one unit (e.g. one snapshot)
  unknown_sequence = 7,   ///< the sequence id was never admitted or was already released
  duplicate_sequence = 8, ///< the sequence id is already live
  double_release = 9,     ///< the block, slot or sequence was already released
  out_of_range = 10,      ///< an index (slot, block, layer, position) is outside its pool or sequence
  overlapping_pairs = 11, ///< a copy list names one destination twice or reads a slot another pair writes
  device_error = 12,      ///< the CUDA runtime reported an error
  no_device = 13,         ///< a device call was made but no CUDA device is present
  invariant_violated = 14, ///< `check_invariants()` found inconsistent bookkeeping (a bug, never bad input)
  unwritten_blocks = 15,  ///< a block shared within a step (`share_in_step`) is not written by its writer
};

/// Short, stable, human-readable name of an error (`"pool_exhausted"`).
constexpr std::string_view to_string(errc e) noexcept {
  switch (e) {
  case errc::invalid_argument: return "invalid_argument";
  case errc::size_mismatch: return "size_mismatch";
  case errc::misaligned: return "misaligned";
  case errc::unsupported_config: return "unsupported_config";
  case errc::pool_exhausted: return "pool_exhausted";
  case errc::budget_too_small: return "budget_too_small";
  case errc::unknown_sequence: return "unknown_sequence";
  case errc::duplicate_sequence: return "duplicate_sequence";
  case errc::double_release: return "double_release";
  case errc::out_of_range: return "out_of_range";
  case errc::overlapping_pairs: return "overlapping_pairs";
  case errc::device_error: return "device_error";
  case errc::no_device: return "no_device";
  case errc::invariant_violated: return "invariant_violated";
  case errc::unwritten_blocks: return "unwritten_blocks";
  }
  return "unknown_error";
}

namespace detail {
class errc_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "reprise"; }
  std::string message(int v) const override { return std::string(to_string(static_cast<errc>(v))); }
};
} // namespace detail

/// The `std::error_category` of `reprise::errc`.
inline const std::error_category& errc_category() noexcept {
  static const detail::errc_category_impl category;
  return category;
}

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), errc_category()};
}

/// Wraps an error for construction of a failed `result` (mirrors `std::unexpected`).
struct failure {
  errc code;
};

/// The value of a call that can fail: either a `T` or an `errc`.
///
/// A deliberately small subset of C++23 `std::expected<T, errc>` with the same member names
/// (`has_value`, `value`, `error`, `operator*`, `operator->`, `value_or`), so engines that build with
/// C++23 read it the same way. Accessing the value of a failed result is a precondition violation
/// (checked by `assert` in debug builds), never an exception: this type lives on the hot path.
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_reference_v<T>, "result<T>: T must be an object type");

public:
  using value_type = T;

  result()
    requires std::is_default_constructible_v<T>
      : ok_(true), value_() {}
  result(const T& v) : ok_(true), value_(v) {}
  result(T&& v) : ok_(true), value_(std::move(v)) {}
  result(failure f) noexcept : ok_(false), error_(f.code) {}
  result(errc e) noexcept : ok_(false), error_(e) {}

  result(const result& o) : ok_(o.ok_) {
    if (ok_) new (&value_) T(o.value_);
    else error_ = o.error_;
  }
  result(result&& o) noexcept(std::is_nothrow_move_constructible_v<T>) : ok_(o.ok_) {
    if (ok_) new (&value_) T(std::move(o.value_));
    else error_ = o.error_;
  }
  result& operator=(const result& o) {
    if (this != &o) assign(o);
    return *this;
  }
  result& operator=(result&& o) noexcept(std::is_nothrow_move_constructible_v<T> &&
                                         std::is_nothrow_move_assignable_v<T>) {
    if (this != &o) assign(std::move(o));
    return *this;
  }
  ~result() {
    if (ok_) value_.~T();
  }

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }

  T& value() & noexcept { return checked(), value_; }
  const T& value() const& noexcept { return checked(), value_; }
  T&& value() && noexcept { return checked(), std::move(value_); }
  T& operator*() & noexcept { return value(); }
  const T& operator*() const& noexcept { return value(); }
  T* operator->() noexcept { return &value(); }
  const T* operator->() const noexcept { return &value(); }
  template <class U>
  T value_or(U&& fallback) const& {
    return ok_ ? value_ : static_cast<T>(std::forward<U>(fallback));
  }

  /// The error; only meaningful when `!has_value()`.
  errc error() const noexcept { return ok_ ? errc{} : error_; }

private:
  template <class R>
  void assign(R&& o) {
    if (ok_ && o.ok_) {
      value_ = std::forward<R>(o).value_;
    } else if (ok_) {
      value_.~T();
      error_ = o.error_;
      ok_ = false;
    } else if (o.ok_) {
      new (&value_) T(std::forward<R>(o).value_);
      ok_ = true;
    } else {
      error_ = o.error_;
    }
  }

  void checked() const noexcept {
#ifndef NDEBUG
    if (!ok_) __builtin_trap();
#endif
  }

  bool ok_;
  union {
    T value_;
    errc error_;
  };
};

/// `result<void>`: success or an `errc`.
template <>
class [[nodiscard]] result<void> {
public:
  using value_type = void;
  result() noexcept = default;
  result(failure f) noexcept : ok_(false), error_(f.code) {}
  result(errc e) noexcept : ok_(false), error_(e) {}
  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const noexcept {}
  errc error() const noexcept { return ok_ ? errc{} : error_; }

private:
  bool ok_ = true;
  errc error_{};
};

} // namespace reprise

template <>
struct std::is_error_code_enum<reprise::errc> : std::true_type {};
