// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What the translation units of the extension module `reprise._reprise` share: one `bind_*` entry point per
/// concern, the errc -> exception mapping, array conversion without Python-level loops, arrays handed back to
/// Python that own a copy of their data (so they never dangle after the next cache call), and the values more
/// than one class takes (`ExtraKeys`, a policy name).

#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::catalog {
enum class policy_id : std::uint8_t; // <reprise/catalog.hpp>
}

namespace reprise::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_model(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_routing(nb::module_& m);
void bind_ops(nb::module_& m);

/// Raises the Python exception class of `e` (`reprise.PoolExhausted`, ...) with "`where`: <errc name> (<what it
/// means>)". Never returns.
[[noreturn]] void raise(errc e, std::string_view where);
/// Raises the Python exception class of `e` with `message` as it is (a message that already says what and where).
[[noreturn]] void raise_message(errc e, const std::string& message);

/// `ExtraKeys`: the extra keys of a prompt (`PrefixCache.admit`, `StateRouter.route`), owning the multimodal
/// digest's bytes.
struct py_extra_keys {
  std::uint64_t model_revision = 0, lora_id = 0, tenant_salt = 0;
  nb::bytes multimodal_digest{};

  extra_keys view() const noexcept {
    return {model_revision, lora_id,
            {reinterpret_cast<const std::byte*>(multimodal_digest.c_str()), multimodal_digest.size()}, tenant_salt};
  }
};

/// The words of `exactness` in the package: "prefill_exact", "decode_continuation".
inline const char* exactness_name(exactness e) noexcept {
  return e == exactness::prefill_exact ? "prefill_exact" : "decode_continuation";
}

/// A content key as Python holds it: 32 bytes.
inline nb::bytes bytes_of(const content_key& k) {
  return nb::bytes(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
}
/// The content key `b` holds; TypeError unless it is bytes, ValueError unless 32 of them (`what` starts the message).
inline content_key key_of(nb::handle b, const std::string& what) {
  if (!nb::isinstance<nb::bytes>(b))
    throw nb::type_error((what + ": a content key is 32 bytes, not " + nb::type_name(b.type()).c_str()).c_str());
  const nb::bytes bytes = nb::borrow<nb::bytes>(b);
  if (bytes.size() != content_key{}.bytes.size())
    throw nb::value_error((what + ": a content key is 32 bytes, not " + std::to_string(bytes.size())).c_str());
  content_key k;
  std::memcpy(k.bytes.data(), bytes.c_str(), k.bytes.size());
  return k;
}

/// The named policy `name` (<reprise/catalog.hpp>), or its catalog name when `name` is a deprecated one (with a
/// DeprecationWarning saying so). Raises ValueError listing the names for any other. `where` starts the
/// messages ("PrefixCache").
catalog::policy_id find_policy(const std::string& name, std::string_view where);

/// The `name` of every entry of a C++ table (`catalog::policy_table`, `metric_table`, ...), in order: the
/// lists the package's `*_names()` functions return.
template <class Table>
std::vector<std::string> names_of(const Table& table) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.emplace_back(entry.name);
  return names;
}

/// The value of `r`, or raises its error.
template <class T>
T value_or_raise(result<T>&& r, std::string_view where) {
  if (!r) raise(r.error(), where);
  return std::move(*r);
}
inline void check(const result<void>& r, std::string_view where) {
  if (!r) raise(r.error(), where);
}

/// A C-contiguous 1-D host array of `T` read from any array-like: numpy arrays, objects with the buffer
/// protocol or DLPack, lists, tuples. The fast path (already `T`, contiguous) is a zero-copy view; anything
/// else goes through `numpy.asarray` (a C loop, never a Python loop). Integer input of another width is
/// range-checked before it is narrowed: an id that does not fit is `OverflowError`, never a silent wrap.
template <class T>
using host_vector = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

host_vector<std::int32_t> as_int32_vector(nb::handle obj, const char* what);
host_vector<std::uint32_t> as_uint32_vector(nb::handle obj, const char* what);
host_vector<std::int64_t> as_int64_vector(nb::handle obj, const char* what);

template <class T>
std::span<const T> span_of(const host_vector<T>& a) noexcept {
  return {a.data(), a.shape(0)};
}

/// A read-only numpy array that owns a copy of `data` (shape `rows` or `rows x cols`).
template <class T>
nb::object owned_array(std::span<const T> data, std::size_t cols = 0) {
  T* copy = new T[data.empty() ? 1 : data.size()];
  if (!data.empty()) std::memcpy(copy, data.data(), data.size_bytes());
  nb::capsule owner(copy, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  if (cols == 0) {
    return nb::cast(nb::ndarray<nb::numpy, const T, nb::ndim<1>>(copy, {data.size()}, owner));
  }
  return nb::cast(nb::ndarray<nb::numpy, const T, nb::ndim<2>>(copy, {data.size() / cols, cols}, owner));
}

} // namespace reprise::python
