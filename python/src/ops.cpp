// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
/// \file
/// `reprise.ops`: the host implementations of the state kernels (include/reprise/ops/) on numpy arrays or any
/// DLPack / buffer-protocol host array, float32. Arrays are viewed in place (C-contiguous, no copy); outputs and
/// state pools are written in place. Validation is the C++ one: an errc raises its exception and, as in C++,
/// nothing has been written. The GIL is released while a kernel runs.
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
#include <limits>
#include <optional>
#include <vector>

namespace reprise::python {
namespace {

using namespace reprise::ops;

template <std::size_t R>
using in_array = nb::ndarray<const float, nb::ndim<R>, nb::c_contig, nb::device::cpu>;
template <std::size_t R>
using out_array = nb::ndarray<float, nb::ndim<R>, nb::c_contig, nb::device::cpu>;
using pair_array = nb::ndarray<const std::int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using capture_array = nb::ndarray<const std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <std::size_t R, class Array, std::size_t... I>
auto view_impl(const Array& a, std::index_sequence<I...>) {
  return make_tensor(a.data(), a.shape(I)...);
}
/// The mdspan view of a rank-R array (an absent optional operand is the null view).
template <std::size_t R, class Array>
auto view(const Array& a) {
  return view_impl<R>(a, std::make_index_sequence<R>{});
}
template <std::size_t R, class Array>
auto view(const std::optional<Array>& a) -> decltype(view<R>(*a)) {
  return a ? view<R>(*a) : decltype(view<R>(*a)){};
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

void conv1d_prefill_py(const in_array<2>& x, const in_array<2>& weight, const std::optional<in_array<1>>& bias,
                       const out_array<3>& conv_pool, const out_array<2>& out, nb::handle cu_seqlens,
                       nb::handle start_positions, nb::handle initial, nb::handle final,
                       const std::optional<capture_array>& captures, bool silu) {
  const prefill_batch b(cu_seqlens, start_positions, initial, final, captures);
  const conv1d_args<float> a{view<2>(x), view<2>(weight), view<1>(bias), view<3>(conv_pool), view<2>(out), silu};
  check(unlocked([&] { return causal_conv1d_prefill_host(a, b.batch(), b.slots()); }), "causal_conv1d_prefill");
}

void conv1d_update_py(const in_array<2>& x, const in_array<2>& weight, const std::optional<in_array<1>>& bias,
                      const out_array<3>& conv_pool, const out_array<2>& out, const pair_array& pairs, bool silu) {
  const std::vector<copy_pair> pr = pairs_of(pairs);
  const conv1d_args<float> a{view<2>(x), view<2>(weight), view<1>(bias), view<3>(conv_pool), view<2>(out), silu};
  check(unlocked([&] { return causal_conv1d_update_host(a, pr); }), "causal_conv1d_update");
}

mamba2_args<float> mamba2_of(const in_array<3>& x, const in_array<2>& dt, const in_array<1>& A, const in_array<3>& B,
                             const in_array<3>& C, const out_array<4>& state_pool, const out_array<3>& y,
                             const std::optional<in_array<1>>& D, const std::optional<in_array<1>>& dt_bias,
                             const std::optional<in_array<3>>& z, std::int64_t chunk, bool dt_softplus, float dt_min,
                             float dt_max) {
  return {view<3>(x), view<2>(dt), view<1>(A),          view<3>(B), view<3>(C),
          view<1>(D), view<1>(dt_bias), view<3>(z), view<4>(state_pool), view<3>(y),
          chunk,      dt_transform{dt_softplus, dt_min, dt_max}};
}

void mamba2_prefill_py(const in_array<3>& x, const in_array<2>& dt, const in_array<1>& A, const in_array<3>& B,
                       const in_array<3>& C, const out_array<4>& state_pool, const out_array<3>& y,
                       nb::handle cu_seqlens, nb::handle start_positions, nb::handle initial, nb::handle final,
                       const std::optional<capture_array>& captures, const std::optional<in_array<1>>& D,
                       const std::optional<in_array<1>>& dt_bias, const std::optional<in_array<3>>& z,
                       std::int64_t chunk, bool dt_softplus, float dt_min, float dt_max) {
  const prefill_batch b(cu_seqlens, start_positions, initial, final, captures);
  const auto a = mamba2_of(x, dt, A, B, C, state_pool, y, D, dt_bias, z, chunk, dt_softplus, dt_min, dt_max);
  check(unlocked([&] { return mamba2_ssd_prefill_host(a, b.batch(), b.slots()); }), "mamba2_ssd_prefill");
}

void mamba2_update_py(const in_array<3>& x, const in_array<2>& dt, const in_array<1>& A, const in_array<3>& B,
                      const in_array<3>& C, const out_array<4>& state_pool, const out_array<3>& y,
                      const pair_array& pairs, const std::optional<in_array<1>>& D,
                      const std::optional<in_array<1>>& dt_bias, const std::optional<in_array<3>>& z,
                      bool dt_softplus, float dt_min, float dt_max) {
  const std::vector<copy_pair> pr = pairs_of(pairs);
  const auto a = mamba2_of(x, dt, A, B, C, state_pool, y, D, dt_bias, z, 256, dt_softplus, dt_min, dt_max);
  check(unlocked([&] { return mamba2_state_update_host(a, pr); }), "mamba2_state_update");
}

gated_delta_args<float> delta_of(const in_array<3>& q, const in_array<3>& k, const in_array<3>& v,
                                 const in_array<2>& g, const in_array<2>& beta, const out_array<4>& state_pool,
                                 const out_array<3>& out) {
  return {view<3>(q), view<3>(k), view<3>(v), view<2>(g), view<2>(beta), view<4>(state_pool), view<3>(out)};
}

void delta_prefill_py(const in_array<3>& q, const in_array<3>& k, const in_array<3>& v, const in_array<2>& g,
                      const in_array<2>& beta, const out_array<4>& state_pool, const out_array<3>& out,
                      nb::handle cu_seqlens, nb::handle start_positions, nb::handle initial, nb::handle final,
                      const std::optional<capture_array>& captures, std::uint32_t chunk, float scale, bool l2norm_qk,
                      float l2norm_eps) {
  const prefill_batch b(cu_seqlens, start_positions, initial, final, captures);
  const auto a = delta_of(q, k, v, g, beta, state_pool, out);
  const gated_delta_options o{chunk, scale, l2norm_qk, l2norm_eps};
  check(unlocked([&] { return gated_delta_chunked_prefill_host(a, o, b.batch(), b.slots()); }),
        "gated_delta_chunked_prefill");
}

void delta_step_py(const in_array<3>& q, const in_array<3>& k, const in_array<3>& v, const in_array<2>& g,
                   const in_array<2>& beta, const out_array<4>& state_pool, const out_array<3>& out,
                   nb::handle cu_seqlens, nb::handle start_positions, const pair_array& pairs, nb::handle ring,
                   std::int32_t ring_size, float scale, bool l2norm_qk, float l2norm_eps) {
  const host_vector<std::int32_t> cu = as_int32_vector(cu_seqlens, "cu_seqlens");
  const host_vector<std::int64_t> starts = as_int64_vector(start_positions, "start_positions");
  const host_vector<std::int32_t> ring_slots =
      as_int32_vector(ring.is_none() ? nb::handle(nb::list()) : ring, "ring");
  const std::vector<copy_pair> pr = pairs_of(pairs);
  const auto a = delta_of(q, k, v, g, beta, state_pool, out);
  const gated_delta_options o{64, scale, l2norm_qk, l2norm_eps};
  const recurrent_slots r{pr, span_of(ring_slots), ring_size};
  const varlen_batch batch{span_of(cu), span_of(starts)};
  check(unlocked([&] { return gated_delta_recurrent_step_host(a, o, batch, r); }), "gated_delta_recurrent_step");
}

} // namespace

void bind_ops(nb::module_& m) {
  // Outputs and state pools are written in place: they are never converted (a converted copy would take the
  // writes and be thrown away); inputs of another dtype or layout are converted.
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
  m.def("causal_conv1d_prefill", &conv1d_prefill_py,
        nb::sig("def causal_conv1d_prefill(x: numpy.typing.NDArray[numpy.float32], "
                "weight: numpy.typing.NDArray[numpy.float32], bias: numpy.typing.NDArray[numpy.float32] | None, "
                "conv_pool: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "initial: numpy.typing.ArrayLike, final: numpy.typing.ArrayLike, "
                "captures: numpy.typing.NDArray[numpy.int64] | None = None, silu: bool = True) -> None"),
        nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(),
        nb::arg("conv_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"), nb::arg("initial"),
        nb::arg("final"), nb::arg("captures") = nb::none(), nb::arg("silu") = true,
        "Causal depthwise conv1d over a varlen batch: x [tokens, C], weight [C, W], bias [C] or None, "
        "conv_pool [slots, W-1, C] (windows read from `initial`, written at captures and to `final`), out "
        "[tokens, C].");
  m.def("causal_conv1d_update", &conv1d_update_py,
        nb::sig("def causal_conv1d_update(x: numpy.typing.NDArray[numpy.float32], "
                "weight: numpy.typing.NDArray[numpy.float32], bias: numpy.typing.NDArray[numpy.float32] | None, "
                "conv_pool: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], "
                "pairs: numpy.typing.NDArray[numpy.int32], silu: bool = True) -> None"),
        nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(),
        nb::arg("conv_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("pairs"), nb::arg("silu") = true,
        "One decode token per row: row r reads window pairs[r, 0], writes out[r] and the shifted window to "
        "pairs[r, 1] (equal: in place). Rows with a negative index are padding.");
  m.def("mamba2_ssd_prefill", &mamba2_prefill_py,
        nb::sig("def mamba2_ssd_prefill(x: numpy.typing.NDArray[numpy.float32], "
                "dt: numpy.typing.NDArray[numpy.float32], A: numpy.typing.NDArray[numpy.float32], "
                "B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], "
                "state_pool: numpy.typing.NDArray[numpy.float32], y: numpy.typing.NDArray[numpy.float32], "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "initial: numpy.typing.ArrayLike, final: numpy.typing.ArrayLike, "
                "captures: numpy.typing.NDArray[numpy.int64] | None = None, "
                "D: numpy.typing.NDArray[numpy.float32] | None = None, "
                "dt_bias: numpy.typing.NDArray[numpy.float32] | None = None, "
                "z: numpy.typing.NDArray[numpy.float32] | None = None, chunk: int = 256, "
                "dt_softplus: bool = True, dt_min: float = 0.0, dt_max: float = 3e38) -> None"),
        nb::arg("x"), nb::arg("dt"), nb::arg("A"), nb::arg("B"),
        nb::arg("C"), nb::arg("state_pool").noconvert(), nb::arg("y").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"),
        nb::arg("initial"), nb::arg("final"), nb::arg("captures") = nb::none(), nb::arg("D") = nb::none(),
        nb::arg("dt_bias") = nb::none(), nb::arg("z") = nb::none(), nb::arg("chunk") = 256,
        nb::arg("dt_softplus") = true, nb::arg("dt_min") = 0.0f, nb::arg("dt_max") = 3.0e38f,
        "Mamba2 SSD chunked prefill on the absolute chunk grid: x [tokens, H, P], dt [tokens, H], A [H], "
        "B and C [tokens, G, N], state_pool [slots, H, P, N] (fp32 states read from `initial`, written at "
        "captures, which must sit on chunk ends, and to `final`), y [tokens, H, P]; D [H], dt_bias [H] and z "
        "[tokens, H, P] optional. A restore from a capture repeats the uninterrupted run bit for bit.");
  m.def("mamba2_state_update", &mamba2_update_py,
        nb::sig("def mamba2_state_update(x: numpy.typing.NDArray[numpy.float32], "
                "dt: numpy.typing.NDArray[numpy.float32], A: numpy.typing.NDArray[numpy.float32], "
                "B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], "
                "state_pool: numpy.typing.NDArray[numpy.float32], y: numpy.typing.NDArray[numpy.float32], "
                "pairs: numpy.typing.NDArray[numpy.int32], D: numpy.typing.NDArray[numpy.float32] | None = None, "
                "dt_bias: numpy.typing.NDArray[numpy.float32] | None = None, "
                "z: numpy.typing.NDArray[numpy.float32] | None = None, dt_softplus: bool = True, "
                "dt_min: float = 0.0, dt_max: float = 3e38) -> None"),
        nb::arg("x"), nb::arg("dt"), nb::arg("A"), nb::arg("B"),
        nb::arg("C"), nb::arg("state_pool").noconvert(), nb::arg("y").noconvert(), nb::arg("pairs"),
        nb::arg("D") = nb::none(),
        nb::arg("dt_bias") = nb::none(), nb::arg("z") = nb::none(), nb::arg("dt_softplus") = true,
        nb::arg("dt_min") = 0.0f, nb::arg("dt_max") = 3.0e38f,
        "Mamba2 selective state update, one decode token per row: reads state pairs[r, 0], writes the advanced "
        "state to pairs[r, 1] and y[r].");
  m.def("gated_delta_chunked_prefill", &delta_prefill_py,
        nb::sig("def gated_delta_chunked_prefill(q: numpy.typing.NDArray[numpy.float32], "
                "k: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], "
                "g: numpy.typing.NDArray[numpy.float32], beta: numpy.typing.NDArray[numpy.float32], "
                "state_pool: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "initial: numpy.typing.ArrayLike, final: numpy.typing.ArrayLike, "
                "captures: numpy.typing.NDArray[numpy.int64] | None = None, chunk: int = 64, scale: float = 0.0, "
                "l2norm_qk: bool = False, l2norm_eps: float = 1e-06) -> None"),
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
        nb::arg("beta"), nb::arg("state_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"),
        nb::arg("initial"), nb::arg("final"), nb::arg("captures") = nb::none(), nb::arg("chunk") = 64,
        nb::arg("scale") = 0.0f, nb::arg("l2norm_qk") = false, nb::arg("l2norm_eps") = 1e-6f,
        "Gated delta rule chunked prefill (WY form) on the absolute chunk grid: q, k [tokens, H, K], v "
        "[tokens, HV, V], g (log-decay) and beta [tokens, HV], state_pool [slots, HV, K, V], out [tokens, HV, V]. "
        "scale 0 selects 1/sqrt(K).");
  m.def("gated_delta_recurrent_step", &delta_step_py,
        nb::sig("def gated_delta_recurrent_step(q: numpy.typing.NDArray[numpy.float32], "
                "k: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], "
                "g: numpy.typing.NDArray[numpy.float32], beta: numpy.typing.NDArray[numpy.float32], "
                "state_pool: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], "
                "cu_seqlens: numpy.typing.ArrayLike, start_positions: numpy.typing.ArrayLike, "
                "pairs: numpy.typing.NDArray[numpy.int32], ring: numpy.typing.ArrayLike | None = None, "
                "ring_size: int = 0, scale: float = 0.0, l2norm_qk: bool = False, "
                "l2norm_eps: float = 1e-06) -> None"),
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
        nb::arg("beta"), nb::arg("state_pool").noconvert(), nb::arg("out").noconvert(), nb::arg("cu_seqlens"),
        nb::arg("start_positions"),
        nb::arg("pairs"), nb::arg("ring") = nb::none(), nb::arg("ring_size") = 0, nb::arg("scale") = 0.0f,
        nb::arg("l2norm_qk") = false, nb::arg("l2norm_eps") = 1e-6f,
        "Gated delta rule recurrent step (decode, or a few tokens per sequence): state from pairs[s, 0], final "
        "state to pairs[s, 1]; with a ring ([S, ring_size] slots) the state after each token too.");
}

} // namespace reprise::python
