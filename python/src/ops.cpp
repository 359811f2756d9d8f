// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// `reprise.ops`: the host implementations of the state kernels (include/reprise/ops/) on numpy arrays or any
/// DLPack / buffer-protocol host array. Arrays are viewed in place (C-contiguous, no copy); outputs and state
/// pools are written in place. Validation is the C++ one: an errc raises its exception and, as in C++, nothing
/// has been written. The GIL is released while a kernel runs.
///
/// Element types are those of the host kernels (`activation_element`, `state_element` in
/// include/reprise/ops/tensor.hpp): activations (x, dt, B, C, z, y; q, k, v, out; the conv window) are fp32 or
/// bf16, chosen per call by `dtype=`; state pools are fp32, or bf16 / fp16 where the kernel takes lossy pools
/// (`state_dtype=`); weights, biases, A, D, dt_bias, g and beta are fp32. numpy has no bfloat16: a bf16 array
/// is a uint16 array of the raw bits, named by `dtype='bfloat16'` / `state_dtype='bfloat16'` (an
/// `ml_dtypes.bfloat16` array passes as `a.view(numpy.uint16)`). A dtype a kernel does not take is a TypeError
/// naming the argument, before anything is written.
///
/// Batch metadata follows include/reprise/ops/slots.hpp: `cu_seqlens` (S+1 int32 offsets), `start_positions`
/// (S int64 absolute positions), `initial` / `final` slots (S int32, -1: zero state / not stored), `captures`
/// int64 [n, 3] (sequence, position, slot) and `pairs` int32 [n, 2] (src, dst); `PrefixCache.take_transfers`
/// returns its moves in that layout.

#include "bindings.hpp"

#include <reprise/ops/conv1d.hpp>
#include <reprise/ops/gated_delta.hpp>
#include <reprise/ops/mamba2.hpp>
#include <reprise/ops/state_copy.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace reprise::python {
namespace {

using namespace reprise::ops;

using pair_array = nb::ndarray<const std::int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using capture_array = nb::ndarray<const std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
/// An output or state pool: taken in place (`.noconvert()`), its element type checked against the call's.
template <std::size_t R>
using written_array = nb::ndarray<nb::ndim<R>, nb::c_contig, nb::device::cpu>;
/// An input as the kernel reads it: C-contiguous elements `E` (uint16 for bfloat16 bits).
template <class E, std::size_t R>
using input_array = nb::ndarray<const E, nb::ndim<R>, nb::c_contig, nb::device::cpu>;

template <class T>
struct type_tag {};

/// How numpy holds activation elements `T`: float32, or bfloat16 as uint16 bits.
template <class T>
using storage_t = std::conditional_t<std::is_same_v<T, float>, float, std::uint16_t>;

nb::dlpack::dtype storage_dtype(dtype t) {
  switch (t) {
  case dtype::f32: return nb::dtype<float>();
  case dtype::bf16: return nb::dtype<std::uint16_t>();
  default: return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}; // f16
  }
}

/// The numpy name of an array's element type ("float32", "uint16", ...).
std::string name_of(nb::dlpack::dtype t) {
  const char* code = "?";
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
  case nb::dlpack::dtype_code::Int: code = "int"; break;
  case nb::dlpack::dtype_code::UInt: code = "uint"; break;
  case nb::dlpack::dtype_code::Float: code = "float"; break;
  case nb::dlpack::dtype_code::Bfloat: code = "bfloat"; break;
  case nb::dlpack::dtype_code::Complex: code = "complex"; break;
  case nb::dlpack::dtype_code::Bool: return "bool";
  default: break;
  }
  return code + std::to_string(t.bits);
}

/// How an argument of element type `t` is passed.
const char* spelled(dtype t) {
  switch (t) {
  case dtype::f32: return "float32";
  case dtype::bf16: return "uint16 holding bfloat16 bits";
  case dtype::f16: return "float16";
  default: return "?";
  }
}

[[noreturn]] void type_error(const char* where, const char* arg, const std::string& what) {
  throw nb::type_error((std::string(where) + ": " + arg + ": " + what).c_str());
}

/// The element type of `obj` as it is (no conversion), or nothing when it is not a host array.
std::optional<nb::dlpack::dtype> element_of(nb::handle obj) {
  nb::ndarray<nb::ro, nb::device::cpu> a;
  if (nb::try_cast(obj, a, false)) return a.dtype();
  return std::nullopt;
}

/// A `dtype=` / `state_dtype=` argument: None, a name `reprise::parse_dtype` knows (`'float32'`, `'bf16'`,
/// `'torch.bfloat16'`, a shape's `conv_dtype` / `state_dtype`) or a numpy dtype (`numpy.float16`).
std::optional<dtype> dtype_arg(nb::handle h, const char* where, const char* arg) {
  if (h.is_none()) return std::nullopt;
  const std::string name = nb::isinstance<nb::str>(h)
                               ? nb::cast<std::string>(h)
                               : nb::cast<std::string>(nb::module_::import_("numpy").attr("dtype")(h).attr("name"));
  dtype t{};
  if (!reprise::parse_dtype(name, t))
    throw nb::value_error((std::string(where) + ": " + arg + ": unknown dtype '" + name + "'").c_str());
  return t;
}

/// The activation element type of a call: `dtype=`, or else that of `out` (the written activations). The
/// host kernels read and write fp32 or bf16 activations (`activation_element`).
dtype activation_type(nb::handle dtype_given, nb::dlpack::dtype out, const char* out_name, const char* where) {
  if (const std::optional<dtype> t = dtype_arg(dtype_given, where, "dtype")) {
    if (*t != dtype::f32 && *t != dtype::bf16)
      type_error(where, "dtype",
                 "the kernels take float32 or bfloat16 activations, not " + std::string(to_string(*t)) +
                     (*t == dtype::f16 ? " (float16 is a state-pool type only)" : ""));
    return *t;
  }
  if (out == nb::dtype<float>()) return dtype::f32;
  if (out == nb::dtype<std::uint16_t>())
    type_error(where, out_name, "a uint16 array is taken as bfloat16 bits only with dtype='bfloat16'");
  type_error(where, out_name,
             "takes float32, or uint16 holding bfloat16 bits with dtype='bfloat16'; got " + name_of(out) +
                 (out == storage_dtype(dtype::f16) ? " (the kernels take no float16 activations)" : ""));
}

/// The state pool's element type: `state_dtype=`, or else the pool's own (float32, float16); one of `taken`.
dtype state_type(nb::handle given, nb::dlpack::dtype pool, std::initializer_list<dtype> taken, const char* where) {
  auto takes = [&](dtype t) {
    for (dtype x : taken)
      if (x == t) return true;
    return false;
  };
  const std::string taken_text = taken.size() == 1
                                     ? std::string("takes float32 pools only (fp32 is the prefill's state type)")
                                     : std::string("takes float32, float16, or uint16 holding bfloat16 bits with "
                                                   "state_dtype='bfloat16'");
  dtype t{};
  if (const std::optional<dtype> g = dtype_arg(given, where, "state_dtype")) {
    if (!takes(*g)) type_error(where, "state_dtype", taken_text + ", not " + std::string(to_string(*g)));
    t = *g;
  } else if (pool == nb::dtype<float>()) {
    t = dtype::f32;
  } else if (pool == storage_dtype(dtype::f16) && takes(dtype::f16)) {
    t = dtype::f16;
  } else if (pool == nb::dtype<std::uint16_t>() && takes(dtype::bf16)) {
    type_error(where, "state_pool", "a uint16 pool is taken as bfloat16 bits only with state_dtype='bfloat16'");
  } else {
    type_error(where, "state_pool", taken_text + "; got " + name_of(pool));
  }
  if (pool != storage_dtype(t))
    type_error(where, "state_pool",
               "state_dtype='" + std::string(to_string(t)) + "' takes " + spelled(t) + "; got " + name_of(pool));
  return t;
}

template <std::size_t R, class T, class Array, std::size_t... I>
tensor<T, R> view_impl(T* data, const Array& a, std::index_sequence<I...>) {
  return make_tensor(data, a.shape(I)...);
}
/// The mdspan view of rank-R array `a` as elements `T` (an invalid array is the null view: an absent operand).
template <class T, std::size_t R, class Array>
tensor<T, R> view_as(const Array& a) {
  if (!a.is_valid()) return {};
  return view_impl<R>(static_cast<T*>(const_cast<void*>(static_cast<const void*>(a.data()))), a,
                      std::make_index_sequence<R>{});
}

/// An output or pool of element type `T`: its view, or TypeError when it holds another type.
template <class T, std::size_t R>
tensor<T, R> written_view(const written_array<R>& a, const char* where, const char* arg, const char* rule) {
  const dtype t = dtype_of<T>;
  if (a.dtype() != storage_dtype(t))
    type_error(where, arg, std::string("takes ") + spelled(t) + " (" + rule + "); got " + name_of(a.dtype()));
  return view_as<T, R>(a);
}

/// A float32 input (weights, biases, A, D, dt_bias, g, beta; activations with dtype float32): other float
/// arrays and other layouts are converted. A uint16 array is refused: it would be bfloat16 bits, which only the
/// activations take (with dtype='bfloat16').
template <std::size_t R>
input_array<float, R> float_input(nb::handle obj, const char* where, const char* arg, bool activation) {
  input_array<float, R> a;
  if (nb::try_cast(obj, a, false)) return a; // already float32 and C-contiguous: viewed in place
  if (element_of(obj) == nb::dtype<std::uint16_t>())
    type_error(where, arg,
               activation ? "a uint16 array is taken as bfloat16 bits only with dtype='bfloat16'"
                          : "takes float32 (uint16 bfloat16 bits are taken by the activations only)");
  if (!nb::try_cast(obj, a, true))
    type_error(where, arg, "expected a " + std::to_string(R) + "-dimensional float32 host array");
  return a;
}

/// An activation input of element type `T`: float32 as `float_input`; bfloat16 as a uint16 array of its bits
/// (any layout, made C-contiguous; never converted from another dtype, which would not be bfloat16 bits).
template <class T, std::size_t R>
input_array<storage_t<T>, R> activation_input(nb::handle obj, const char* where, const char* arg) {
  if constexpr (std::is_same_v<T, float>) {
    return float_input<R>(obj, where, arg, true);
  } else {
    input_array<std::uint16_t, R> a;
    if (nb::try_cast(obj, a, false)) return a;
    const std::optional<nb::dlpack::dtype> e = element_of(obj);
    if (e != nb::dtype<std::uint16_t>())
      type_error(where, arg,
                 "dtype='bfloat16' takes uint16 arrays holding bfloat16 bits; got " +
                     (e ? name_of(*e) : std::string("no host array")) +
                     (e && e->code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat)
                          ? " (pass its bits: a view as uint16)"
                          : ""));
    if (!nb::try_cast(obj, a, true))
      type_error(where, arg, "expected a " + std::to_string(R) + "-dimensional uint16 host array");
    return a;
  }
}

/// An optional input (None: absent).
template <class T, std::size_t R>
input_array<storage_t<T>, R> optional_activation(nb::handle obj, const char* where, const char* arg) {
  return obj.is_none() ? input_array<storage_t<T>, R>{} : activation_input<T, R>(obj, where, arg);
}
template <std::size_t R>
input_array<float, R> optional_float(nb::handle obj, const char* where, const char* arg) {
  return obj.is_none() ? input_array<float, R>{} : float_input<R>(obj, where, arg, false);
}

/// Calls `f(type_tag<T>{})` with the activation element type `t`.
template <class F>
void with_activation(dtype t, F&& f) {
  if (t == dtype::bf16) f(type_tag<bfloat16>{});
  else f(type_tag<float>{});
}
/// Calls `f(type_tag<S>{})` with the state element type `t`.
template <class F>
void with_state(dtype t, F&& f) {
  switch (t) {
  case dtype::bf16: f(type_tag<bfloat16>{}); break;
  case dtype::f16: f(type_tag<float16>{}); break;
  default: f(type_tag<float>{}); break;
  }
}

/// Runs `kernel` with the GIL released (errors are raised after it is taken back).
template <class Kernel>
result<void> unlocked(Kernel&& kernel) {
  nb::gil_scoped_release released;
  return kernel();
}

std::vector<copy_pair> pairs_of(const pair_array& p) {
  if (p.shape(1) != 2) throw nb::value_error("pairs must have shape [n, 2] (src, dst)");
  std::vector<copy_pair> out(p.shape(0));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = {p.data()[2 * i], p.data()[2 * i + 1]};
  return out;
}

std::vector<capture_point> captures_of(const std::optional<capture_array>& c) {
  std::vector<capture_point> out;
  if (!c) return out;
  if (c->shape(1) != 3) throw nb::value_error("captures must have shape [n, 3] (sequence, position, slot)");
  out.resize(c->shape(0));
  const std::int64_t* d = c->data();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (d[3 * i] < 0 || d[3 * i] > std::numeric_limits<std::int32_t>::max() || d[3 * i + 2] < 0 ||
        d[3 * i + 2] > std::numeric_limits<std::int32_t>::max())
      raise(errc::out_of_range, "captures");
    out[i] = {static_cast<std::int32_t>(d[3 * i]), d[3 * i + 1], static_cast<std::int32_t>(d[3 * i + 2])};
  }
  return out;
}

/// The varlen batch and prefill slots of a call, owning their host arrays.
struct prefill_batch {
  host_vector<std::int32_t> cu;
  host_vector<std::int64_t> starts;
  host_vector<std::int32_t> initial, final;
  std::vector<capture_point> captures;

  prefill_batch(nb::handle cu_seqlens, nb::handle start_positions, nb::handle initial_slots, nb::handle final_slots,
                const std::optional<capture_array>& caps)
      : cu(as_int32_vector(cu_seqlens, "cu_seqlens")), starts(as_int64_vector(start_positions, "start_positions")),
        initial(as_int32_vector(initial_slots, "initial")), final(as_int32_vector(final_slots, "final")),
        captures(captures_of(caps)) {}

  varlen_batch batch() const { return {span_of(cu), span_of(starts)}; }
  prefill_slots slots() const { return {span_of(initial), span_of(final), captures}; }
};

using pool_array = nb::ndarray<nb::c_contig, nb::device::cpu>;
using source_pool_array = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

/// A pool as units along its leading dimension.
template <class Array>
pool_view pool_of(const Array& p, const char* where) {
  if (p.ndim() == 0 || p.shape(0) == 0) raise(errc::invalid_argument, where);
  return {const_cast<void*>(static_cast<const void*>(p.data())), p.nbytes() / p.shape(0),
          static_cast<std::int64_t>(p.shape(0))};
}

void copy_units_py(const std::vector<pool_array>& pools, const pair_array& pairs) {
  std::vector<pool_view> views;
  views.reserve(pools.size());
  for (const auto& p : pools) views.push_back(pool_of(p, "copy_units: empty pool"));
  const std::vector<copy_pair> pr = pairs_of(pairs);
  check(unlocked([&] { return copy_units_host(views, pr); }), "copy_units");
}

void transfer_units_py(const std::vector<source_pool_array>& src_pools, const std::vector<pool_array>& dst_pools,
                       const pair_array& pairs) {
  if (src_pools.size() != dst_pools.size())
    raise(errc::size_mismatch, "transfer_units: src_pools and dst_pools differ in length");
  std::vector<pool_pair_view> layers;
  layers.reserve(src_pools.size());
  for (std::size_t i = 0; i < src_pools.size(); ++i)
    layers.push_back({pool_of(src_pools[i], "transfer_units: empty pool"),
                      pool_of(dst_pools[i], "transfer_units: empty pool")});
  const std::vector<copy_pair> pr = pairs_of(pairs);
  check(unlocked([&] { return transfer_units_host(layers, pr); }), "transfer_units");
}

/// The operands of a conv1d call with activations `T`, owning the input arrays it converted.
template <class T>
struct conv1d_call {
  input_array<storage_t<T>, 2> x;
  input_array<float, 2> weight;
  input_array<float, 1> bias;
  conv1d_args<T> args;

  conv1d_call(nb::handle x_, nb::handle weight_, nb::handle bias_, const written_array<3>& conv_pool,
              const written_array<2>& out, bool silu, const char* where)
      : x(activation_input<T, 2>(x_, where, "x")), weight(float_input<2>(weight_, where, "weight", false)),
        bias(optional_float<1>(bias_, where, "bias")) {
    args = {view_as<const T, 2>(x),
            view_as<const float, 2>(weight),
            view_as<const float, 1>(bias),
            written_view<T, 3>(conv_pool, where, "conv_pool", "the conv window has the activations' dtype"),
            written_view<T, 2>(out, where, "out", "the activations' dtype"),
            silu};
  }
};

void conv1d_prefill_py(nb::handle x, nb::handle weight, nb::handle bias, const written_array<3>& conv_pool,
                       const written_array<2>& out, nb::handle cu_seqlens, nb::handle start_positions,
                       nb::handle initial, nb::handle final, const std::optional<capture_array>& captures, bool silu,
                       nb::handle dtype_given) {
  constexpr const char* where = "causal_conv1d_prefill";
  const dtype t = activation_type(dtype_given, out.dtype(), "out", where);
  with_activation(t, [&]<class T>(type_tag<T>) {
    const conv1d_call<T> c(x, weight, bias, conv_pool, out, silu, where);
    const prefill_batch b(cu_seqlens, start_positions, initial, final, captures);
    check(unlocked([&] { return causal_conv1d_prefill_host(c.args, b.batch(), b.slots()); }), where);
  });
}

void conv1d_update_py(nb::handle x, nb::handle weight, nb::handle bias, const written_array<3>& conv_pool,
                      const written_array<2>& out, const pair_array& pairs, bool silu, nb::handle dtype_given) {
  constexpr const char* where = "causal_conv1d_update";
  const dtype t = activation_type(dtype_given, out.dtype(), "out", where);
  with_activation(t, [&]<class T>(type_tag<T>) {
    const conv1d_call<T> c(x, weight, bias, conv_pool, out, silu, where);
    const std::vector<copy_pair> pr = pairs_of(pairs);
    check(unlocked([&] { return causal_conv1d_update_host(c.args, pr); }), where);
  });
}

/// The inputs of a Mamba2 call with activations `T`, converted and owned.
template <class T>
struct mamba2_inputs {
  input_array<storage_t<T>, 3> x;
  input_array<storage_t<T>, 2> dt;
  input_array<float, 1> A;
  input_array<storage_t<T>, 3> B, C;
  input_array<float, 1> D, dt_bias;
  input_array<storage_t<T>, 3> z;

  mamba2_inputs(nb::handle x_, nb::handle dt_, nb::handle A_, nb::handle B_, nb::handle C_, nb::handle D_,
                nb::handle dt_bias_, nb::handle z_, const char* where)
      : x(activation_input<T, 3>(x_, where, "x")), dt(activation_input<T, 2>(dt_, where, "dt")),
        A(float_input<1>(A_, where, "A", false)), B(activation_input<T, 3>(B_, where, "B")),
        C(activation_input<T, 3>(C_, where, "C")), D(optional_float<1>(D_, where, "D")),
        dt_bias(optional_float<1>(dt_bias_, where, "dt_bias")), z(optional_activation<T, 3>(z_, where, "z")) {}

  template <class State>
  mamba2_args<T, State> args(const written_array<4>& state_pool, const written_array<3>& y, std::int64_t chunk,
                             dt_transform dt_mode, const char* where) const {
    return {view_as<const T, 3>(x),
            view_as<const T, 2>(dt),
            view_as<const float, 1>(A),
            view_as<const T, 3>(B),
            view_as<const T, 3>(C),
            view_as<const float, 1>(D),
            view_as<const float, 1>(dt_bias),
            view_as<const T, 3>(z),
            written_view<State, 4>(state_pool, where, "state_pool", "state_dtype"),
            written_view<T, 3>(y, where, "y", "the activations' dtype"),
            chunk,
            dt_mode};
  }
};

void mamba2_prefill_py(nb::handle x, nb::handle dt, nb::handle A, nb::handle B, nb::handle C,
                       const written_array<4>& state_pool, const written_array<3>& y, nb::handle cu_seqlens,
                       nb::handle start_positions, nb::handle initial, nb::handle final,
                       const std::optional<capture_array>& captures, nb::handle D, nb::handle dt_bias, nb::handle z,
                       std::int64_t chunk, bool dt_softplus, float dt_min, float dt_max, nb::handle dtype_given,
                       nb::handle state_dtype) {
  constexpr const char* where = "mamba2_ssd_prefill";
  const dtype t = activation_type(dtype_given, y.dtype(), "y", where);
  state_type(state_dtype, state_pool.dtype(), {dtype::f32}, where); // the prefill keeps fp32 states
  with_activation(t, [&]<class T>(type_tag<T>) {
    const mamba2_inputs<T> in(x, dt, A, B, C, D, dt_bias, z, where);
    const auto a = in.template args<float>(state_pool, y, chunk, {dt_softplus, dt_min, dt_max}, where);
    const prefill_batch b(cu_seqlens, start_positions, initial, final, captures);
    check(unlocked([&] { return mamba2_ssd_prefill_host(a, b.batch(), b.slots()); }), where);
  });
}

void mamba2_update_py(nb::handle x, nb::handle dt, nb::handle A, nb::handle B, nb::handle C,
                      const written_array<4>& state_pool, const written_array<3>& y, const pair_array& pairs,
                      nb::handle D, nb::handle dt_bias, nb::handle z, bool dt_softplus, float dt_min, float dt_max,
                      nb::handle dtype_given, nb::handle state_dtype) {
  constexpr const char* where = "mamba2_state_update";
  const dtype t = activation_type(dtype_given, y.dtype(), "y", where);
  const dtype s = state_type(state_dtype, state_pool.dtype(), {dtype::f32, dtype::bf16, dtype::f16}, where);
  with_activation(t, [&]<class T>(type_tag<T>) {
    const mamba2_inputs<T> in(x, dt, A, B, C, D, dt_bias, z, where);
    const std::vector<copy_pair> pr = pairs_of(pairs);
    with_state(s, [&]<class State>(type_tag<State>) {
      const auto a = in.template args<State>(state_pool, y, 256, {dt_softplus, dt_min, dt_max}, where);
      check(unlocked([&] { return mamba2_state_update_host(a, pr); }), where);
    });
  });
}

/// The inputs of a gated-delta call with activations `T`, converted and owned.
template <class T>
struct delta_inputs {
  input_array<storage_t<T>, 3> q, k, v;
  input_array<float, 2> g, beta;

  delta_inputs(nb::handle q_, nb::handle k_, nb::handle v_, nb::handle g_, nb::handle beta_, const char* where)
      : q(activation_input<T, 3>(q_, where, "q")), k(activation_input<T, 3>(k_, where, "k")),
        v(activation_input<T, 3>(v_, where, "v")), g(float_input<2>(g_, where, "g", false)),
        beta(float_input<2>(beta_, where, "beta", false)) {}

  template <class State>
  gated_delta_args<T, State> args(const written_array<4>& state_pool, const written_array<3>& out,
                                  const char* where) const {
    return {view_as<const T, 3>(q),
            view_as<const T, 3>(k),
            view_as<const T, 3>(v),
            view_as<const float, 2>(g),
            view_as<const float, 2>(beta),
            written_view<State, 4>(state_pool, where, "state_pool", "state_dtype"),
            written_view<T, 3>(out, where, "out", "the activations' dtype")};
  }
};

void delta_prefill_py(nb::handle q, nb::handle k, nb::handle v, nb::handle g, nb::handle beta,
                      const written_array<4>& state_pool, const written_array<3>& out, nb::handle cu_seqlens,
                      nb::handle start_positions, nb::handle initial, nb::handle final,
                      const std::optional<capture_array>& captures, std::uint32_t chunk, float scale, bool l2norm_qk,
                      float l2norm_eps, nb::handle dtype_given, nb::handle state_dtype) {
  constexpr const char* where = "gated_delta_chunked_prefill";
  const dtype t = activation_type(dtype_given, out.dtype(), "out", where);
  const dtype s = state_type(state_dtype, state_pool.dtype(), {dtype::f32, dtype::bf16, dtype::f16}, where);
  with_activation(t, [&]<class T>(type_tag<T>) {
    const delta_inputs<T> in(q, k, v, g, beta, where);
    const prefill_batch b(cu_seqlens, start_positions, initial, final, captures);
    const gated_delta_options o{chunk, scale, l2norm_qk, l2norm_eps};
    with_state(s, [&]<class State>(type_tag<State>) {
      const auto a = in.template args<State>(state_pool, out, where);
      check(unlocked([&] { return gated_delta_chunked_prefill_host(a, o, b.batch(), b.slots()); }), where);
    });
  });
}

void delta_step_py(nb::handle q, nb::handle k, nb::handle v, nb::handle g, nb::handle beta,
                   const written_array<4>& state_pool, const written_array<3>& out, nb::handle cu_seqlens,
                   nb::handle start_positions, const pair_array& pairs, nb::handle ring, std::int32_t ring_size,
                   float scale, bool l2norm_qk, float l2norm_eps, nb::handle dtype_given, nb::handle state_dtype) {
  constexpr const char* where = "gated_delta_recurrent_step";
  const dtype t = activation_type(dtype_given, out.dtype(), "out", where);
  const dtype s = state_type(state_dtype, state_pool.dtype(), {dtype::f32, dtype::bf16, dtype::f16}, where);
  with_activation(t, [&]<class T>(type_tag<T>) {
    const delta_inputs<T> in(q, k, v, g, beta, where);
    const host_vector<std::int32_t> cu = as_int32_vector(cu_seqlens, "cu_seqlens");
    const host_vector<std::int64_t> starts = as_int64_vector(start_positions, "start_positions");
    const host_vector<std::int32_t> ring_slots =
        as_int32_vector(ring.is_none() ? nb::handle(nb::list()) : ring, "ring");
    const std::vector<copy_pair> pr = pairs_of(pairs);
    const gated_delta_options o{64, scale, l2norm_qk, l2norm_eps};
    const recurrent_slots r{pr, span_of(ring_slots), ring_size};
    const varlen_batch batch{span_of(cu), span_of(starts)};
    with_state(s, [&]<class State>(type_tag<State>) {
      const auto a = in.template args<State>(state_pool, out, where);
      check(unlocked([&] { return gated_delta_recurrent_step_host(a, o, batch, r); }), where);
    });
  });
}

} // namespace

void bind_ops(nb::module_& m) {
  // Outputs and state pools are written in place: they are never converted (a converted copy would take the
  // writes and be thrown away); float32 inputs of another float dtype or layout are converted, bfloat16 inputs
  // (uint16 bits) only made contiguous.
  m.def("copy_units", &copy_units_py,
        nb::sig("def copy_units(pools: collections.abc.Sequence[numpy.typing.NDArray], "
                "pairs: numpy.typing.NDArray[numpy.int32]) -> None"),
        nb::arg("pools").noconvert(), nb::arg("pairs"),
        "For every pool (a writable C-contiguous array whose leading extent is the slot or block) and every "
        "(src, dst) pair of `pairs` (int32 [n, 2]): unit dst = unit src, byte for byte. Snapshot save, restore "
        "and fork over all recurrent layers' pools, or a KV block copy. Raises OutOfRange, OverlappingPairs, "
        "InvalidArgument; TypeError for a pool that is not a writable C-contiguous array (a strided view, a "
        "negative stride, Fortran order), which a copy would be written into instead; nothing is written on "
        "error.");
  m.def("transfer_units", &transfer_units_py,
        nb::sig("def transfer_units(src_pools: collections.abc.Sequence[numpy.typing.NDArray], "
                "dst_pools: collections.abc.Sequence[numpy.typing.NDArray], "
                "pairs: numpy.typing.NDArray[numpy.int32]) -> None"),
        nb::arg("src_pools"), nb::arg("dst_pools").noconvert(), nb::arg("pairs"),
        "Moves units between two sets of pools, layer by layer: for every i and every (src, dst) pair of `pairs` "
        "(int32 [n, 2]), unit dst of dst_pools[i] = unit src of src_pools[i], byte for byte. Pools are "
        "C-contiguous arrays whose leading extent is the unit (one per layer, in the same order on both sides; "
        "dst_pools writable); src_pools[i] and dst_pools[i] have equal unit sizes and may have different unit "
        "counts. The host tier's moves (PrefixCache.take_transfers): kv_offload from the GPU KV pools to the host "
        "KV pools, snapshot_offload from the GPU snapshot pools to the host snapshot pools, kv_onboard back, and "
        "a restore_from_host from the host snapshot pools into the live state. Raises OutOfRange (an index "
        "outside its side's pools), OverlappingPairs (a destination named twice), SizeMismatch (unit sizes, or "
        "pool counts, differ), InvalidArgument (an empty pool, or a destination pool that shares memory with "
        "another pool of the call other than its own source when that is the very same array); nothing is "
        "written on error.");
  // Element types (module docstring of reprise.ops): activations float32 or bfloat16 (uint16 bits) by `dtype`,
  // state pools by `state_dtype` where a kernel takes lossy pools, everything else float32.
#define REPRISE_F32 "numpy.typing.NDArray[numpy.float32]"
#define REPRISE_ACT "numpy.typing.NDArray[numpy.float32 | numpy.uint16]"
#define REPRISE_POOL "numpy.typing.NDArray[numpy.float32 | numpy.float16 | numpy.uint16]"
#define REPRISE_DTYPES "dtype: numpy.typing.DTypeLike = None"
  m.def("causal_conv1d_prefill", &conv1d_prefill_py,
        nb::sig("def causal_conv1d_prefill(x: " REPRISE_ACT ", weight: " REPRISE_F32 ", bias: " REPRISE_F32
                " | None, conv_pool: " REPRISE_ACT ", out: " REPRISE_ACT ", "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "initial: numpy.typing.ArrayLike, final: numpy.typing.ArrayLike, "
                "captures: numpy.typing.NDArray[numpy.int64] | None = None, silu: bool = True, " REPRISE_DTYPES
                ") -> None"),
        nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(),
        nb::arg("conv_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"), nb::arg("initial"),
        nb::arg("final"), nb::arg("captures") = nb::none(), nb::arg("silu") = true, nb::arg("dtype") = nb::none(),
        "Causal depthwise conv1d over a varlen batch: x [tokens, C], weight [C, W], bias [C] or None, "
        "conv_pool [slots, W-1, C] (windows read from `initial`, written at captures and to `final`), out "
        "[tokens, C]. x, conv_pool and out share the activation dtype: float32, or bfloat16 as uint16 arrays of "
        "its bits with dtype='bfloat16' (None: out's own, float32); the conv window holds inputs, so it is "
        "stored without rounding. A ModelConfig shape's conv_dtype ('f32', 'bf16') can be passed as `dtype`. "
        "weight and bias are float32. Another dtype is a TypeError naming the argument.");
  m.def("causal_conv1d_update", &conv1d_update_py,
        nb::sig("def causal_conv1d_update(x: " REPRISE_ACT ", weight: " REPRISE_F32 ", bias: " REPRISE_F32
                " | None, conv_pool: " REPRISE_ACT ", out: " REPRISE_ACT ", "
                "pairs: numpy.typing.NDArray[numpy.int32], silu: bool = True, " REPRISE_DTYPES ") -> None"),
        nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(),
        nb::arg("conv_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("pairs"), nb::arg("silu") = true,
        nb::arg("dtype") = nb::none(),
        "One decode token per row: row r reads window pairs[r, 0], writes out[r] and the shifted window to "
        "pairs[r, 1] (equal: in place). Rows with a negative index are padding. Dtypes as causal_conv1d_prefill.");
  m.def("mamba2_ssd_prefill", &mamba2_prefill_py,
        nb::sig("def mamba2_ssd_prefill(x: " REPRISE_ACT ", dt: " REPRISE_ACT ", A: " REPRISE_F32 ", B: " REPRISE_ACT
                ", C: " REPRISE_ACT ", state_pool: " REPRISE_F32 ", y: " REPRISE_ACT ", "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "initial: numpy.typing.ArrayLike, final: numpy.typing.ArrayLike, "
                "captures: numpy.typing.NDArray[numpy.int64] | None = None, D: " REPRISE_F32 " | None = None, "
                "dt_bias: " REPRISE_F32 " | None = None, z: " REPRISE_ACT " | None = None, chunk: int = 256, "
                "dt_softplus: bool = True, dt_min: float = 0.0, dt_max: float = 3e38, " REPRISE_DTYPES
                ", state_dtype: numpy.typing.DTypeLike = None) -> None"),
        nb::arg("x"), nb::arg("dt"), nb::arg("A"), nb::arg("B"),
        nb::arg("C"), nb::arg("state_pool").noconvert(), nb::arg("y").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"),
        nb::arg("initial"), nb::arg("final"), nb::arg("captures") = nb::none(), nb::arg("D") = nb::none(),
        nb::arg("dt_bias") = nb::none(), nb::arg("z") = nb::none(), nb::arg("chunk") = 256,
        nb::arg("dt_softplus") = true, nb::arg("dt_min") = 0.0f, nb::arg("dt_max") = 3.0e38f,
        nb::arg("dtype") = nb::none(), nb::arg("state_dtype") = nb::none(),
        "Mamba2 SSD chunked prefill on the absolute chunk grid: x [tokens, H, P], dt [tokens, H], A [H], "
        "B and C [tokens, G, N], state_pool [slots, H, P, N] (fp32 states read from `initial`, written at "
        "captures, which must sit on chunk ends, and to `final`), y [tokens, H, P]; D [H], dt_bias [H] and z "
        "[tokens, H, P] optional. A restore from a capture repeats the uninterrupted run bit for bit. x, dt, B, "
        "C, z and y share the activation dtype: float32, or bfloat16 as uint16 arrays of its bits with "
        "dtype='bfloat16' (None: y's own, float32). state_pool is float32 only (state_dtype None or 'float32'): "
        "the prefill keeps fp32 states. A, D and dt_bias are float32. Another dtype is a TypeError naming the "
        "argument.");
  m.def("mamba2_state_update", &mamba2_update_py,
        nb::sig("def mamba2_state_update(x: " REPRISE_ACT ", dt: " REPRISE_ACT ", A: " REPRISE_F32
                ", B: " REPRISE_ACT ", C: " REPRISE_ACT ", state_pool: " REPRISE_POOL ", y: " REPRISE_ACT ", "
                "pairs: numpy.typing.NDArray[numpy.int32], D: " REPRISE_F32 " | None = None, "
                "dt_bias: " REPRISE_F32 " | None = None, z: " REPRISE_ACT " | None = None, dt_softplus: bool = True, "
                "dt_min: float = 0.0, dt_max: float = 3e38, " REPRISE_DTYPES
                ", state_dtype: numpy.typing.DTypeLike = None) -> None"),
        nb::arg("x"), nb::arg("dt"), nb::arg("A"), nb::arg("B"),
        nb::arg("C"), nb::arg("state_pool").noconvert(), nb::arg("y").noconvert(), nb::arg("pairs"),
        nb::arg("D") = nb::none(),
        nb::arg("dt_bias") = nb::none(), nb::arg("z") = nb::none(), nb::arg("dt_softplus") = true,
        nb::arg("dt_min") = 0.0f, nb::arg("dt_max") = 3.0e38f, nb::arg("dtype") = nb::none(),
        nb::arg("state_dtype") = nb::none(),
        "Mamba2 selective state update, one decode token per row: reads state pairs[r, 0], writes the advanced "
        "state to pairs[r, 1] and y[r]. Activations as mamba2_ssd_prefill. state_pool is float32, float16, or "
        "bfloat16 as a uint16 array of its bits with state_dtype='bfloat16' (None: the pool's own, float32 or "
        "float16): a bf16 / fp16 state is read as fp32, advanced and used for y in fp32 and rounded once (to "
        "nearest, ties to even) when stored, a lossy decode continuation, never prefill-exact.");
  m.def("gated_delta_chunked_prefill", &delta_prefill_py,
        nb::sig("def gated_delta_chunked_prefill(q: " REPRISE_ACT ", k: " REPRISE_ACT ", v: " REPRISE_ACT
                ", g: " REPRISE_F32 ", beta: " REPRISE_F32 ", state_pool: " REPRISE_POOL ", out: " REPRISE_ACT ", "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "initial: numpy.typing.ArrayLike, final: numpy.typing.ArrayLike, "
                "captures: numpy.typing.NDArray[numpy.int64] | None = None, chunk: int = 64, scale: float = 0.0, "
                "l2norm_qk: bool = False, l2norm_eps: float = 1e-06, " REPRISE_DTYPES
                ", state_dtype: numpy.typing.DTypeLike = None) -> None"),
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
        nb::arg("beta"), nb::arg("state_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"),
        nb::arg("initial"), nb::arg("final"), nb::arg("captures") = nb::none(), nb::arg("chunk") = 64,
        nb::arg("scale") = 0.0f, nb::arg("l2norm_qk") = false, nb::arg("l2norm_eps") = 1e-6f,
        nb::arg("dtype") = nb::none(), nb::arg("state_dtype") = nb::none(),
        "Gated delta rule chunked prefill (WY form) on the absolute chunk grid: q, k [tokens, H, K], v "
        "[tokens, HV, V], g (log-decay) and beta [tokens, HV], state_pool [slots, HV, K, V], out [tokens, HV, V]. "
        "scale 0 selects 1/sqrt(K). q, k, v and out share the activation dtype: float32, or bfloat16 as uint16 "
        "arrays of its bits with dtype='bfloat16' (None: out's own, float32); g and beta are float32. "
        "state_pool is float32 (the prefill-exact state), or float16, or bfloat16 as a uint16 array of its "
        "bits with state_dtype='bfloat16' (None: the pool's own, float32 or float16): a lossy state, read as "
        "fp32 and rounded once at each capture and final store. Another dtype is a TypeError naming the "
        "argument.");
  m.def("gated_delta_recurrent_step", &delta_step_py,
        nb::sig("def gated_delta_recurrent_step(q: " REPRISE_ACT ", k: " REPRISE_ACT ", v: " REPRISE_ACT
                ", g: " REPRISE_F32 ", beta: " REPRISE_F32 ", state_pool: " REPRISE_POOL ", out: " REPRISE_ACT ", "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "pairs: numpy.typing.NDArray[numpy.int32], ring: numpy.typing.ArrayLike | None = None, "
                "ring_size: int = 0, scale: float = 0.0, l2norm_qk: bool = False, "
                "l2norm_eps: float = 1e-06, " REPRISE_DTYPES ", state_dtype: numpy.typing.DTypeLike = None) -> None"),
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
        nb::arg("beta"), nb::arg("state_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"),
        nb::arg("pairs"), nb::arg("ring") = nb::none(), nb::arg("ring_size") = 0, nb::arg("scale") = 0.0f,
        nb::arg("l2norm_qk") = false, nb::arg("l2norm_eps") = 1e-6f, nb::arg("dtype") = nb::none(),
        nb::arg("state_dtype") = nb::none(),
        "Gated delta rule recurrent step (decode, or a few tokens per sequence): state from pairs[s, 0], final "
        "state to pairs[s, 1]; with a ring ([S, ring_size] slots) the state after each token too. Dtypes as "
        "gated_delta_chunked_prefill: a bf16 / fp16 pool is read as fp32, advanced in fp32 and rounded once on "
        "each store.");
#undef REPRISE_F32
#undef REPRISE_ACT
#undef REPRISE_POOL
#undef REPRISE_DTYPES
}

} // namespace reprise::python
