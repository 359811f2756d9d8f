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

/// `ExtraKeys`: the extra keys of a prompt (`PrefixCache.admit`, `StateRouter.route`), owning its media items'
/// digest bytes (Python `bytes` objects, whose buffers the views point into and which the copies keep alive).
struct py_extra_keys {
  std::uint64_t model_revision = 0, lora_id = 0, tenant_salt = 0;
  std::vector<std::uint32_t> positions;
  std::vector<nb::bytes> digests;
  std::vector<media_item> items; ///< views of positions[i], digests[i]

  void link() {
    items.clear();
    for (std::size_t i = 0; i < positions.size(); ++i)
      items.push_back({positions[i], {reinterpret_cast<const std::byte*>(digests[i].c_str()), digests[i].size()}});
  }
  py_extra_keys() = default;
  py_extra_keys(const py_extra_keys& o)
      : model_revision(o.model_revision), lora_id(o.lora_id), tenant_salt(o.tenant_salt), positions(o.positions),
        digests(o.digests) {
    link();
  }
  py_extra_keys& operator=(const py_extra_keys& o) {
    if (this != &o) {
      model_revision = o.model_revision;
      lora_id = o.lora_id;
      tenant_salt = o.tenant_salt;
      positions = o.positions;
      digests = o.digests;
      link();
    }
    return *this;
  }

  extra_keys view() const noexcept {
    return {.model_revision = model_revision, .lora_id = lora_id, .tenant_salt = tenant_salt, .media = items};
  }
};

/// What is wrong with media items the cache or the router refused (`check_media`), in words; empty if nothing.
inline std::string media_problem(std::span<const media_item> media, std::size_t length) {
  for (std::size_t i = 0; i < media.size(); ++i) {
    const std::string at = "extra_keys.media[" + std::to_string(i) + "]";
    if (media[i].digest.size() > max_multimodal_digest_bytes)
      return at + " has a digest of " + std::to_string(media[i].digest.size()) + " bytes, more than " +
             std::to_string(max_multimodal_digest_bytes) + " (pass a digest of the media, never the media)";
    if (i != 0 && media[i].position <= media[i - 1].position)
      return at + " is at position " + std::to_string(media[i].position) +
             ", not after the item before it (items are sorted by strictly increasing position)";
  }
  for (std::size_t i = 0; i < media.size(); ++i)
    if (media[i].position >= length)
      return "extra_keys.media[" + std::to_string(i) + "] is at position " + std::to_string(media[i].position) +
             ", not inside the prompt of " + std::to_string(length) + " tokens";
  return {};
}

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
/// The value of `r`, a call given media items `x.media` over a prompt of `length` tokens, or raises its
/// error, saying what is wrong with the media items when they are why.
template <class T>
T keyed_or_raise(result<T>&& r, const extra_keys& x, std::size_t length, std::string_view where) {
  if (!r && (r.error() == errc::invalid_argument || r.error() == errc::out_of_range)) {
    const std::string problem = media_problem(x.media, length);
    if (!problem.empty())
      raise_message(r.error(), std::string(where) + ": " + std::string(to_string(r.error())) + ": " + problem);
  }
  return value_or_raise(std::move(r), where);
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
