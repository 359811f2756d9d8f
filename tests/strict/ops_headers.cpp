// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Every ops header, with each host template instantiated for every element type it accepts, compiled under
// -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wshadow -Werror (tests/CMakeLists.txt): the ops
// headers are included by engines with strict flags of their own, so they must be clean under g++ and clang++.
#include <reprise/ops/chunk_grid.hpp>
#include <reprise/ops/conv1d.hpp>
#include <reprise/ops/gated_delta.hpp>
#include <reprise/ops/gated_delta_math.hpp>
#include <reprise/ops/mamba2.hpp>
#include <reprise/ops/mamba2_math.hpp>
#include <reprise/ops/math.hpp>
#include <reprise/ops/slots.hpp>
#include <reprise/ops/state_copy.hpp>
#include <reprise/ops/stream.hpp>
#include <reprise/ops/tensor.hpp>

#include <span>

namespace reprise::ops::strict_check {

template <activation_element T>
void use_mamba2(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& s, std::span<const copy_pair> p) {
  (void)mamba2_ssd_prefill_host(a, b, s);
  (void)mamba2_state_update_host(a, p);
  (void)config_of(a, true);
}

/// The decode update is the one Mamba2 template that takes a lossy (bf16 / fp16) state pool.
template <activation_element T, state_element State>
void use_mamba2_lossy(const mamba2_args<T, State>& a, std::span<const copy_pair> p) {
  (void)mamba2_state_update_host(a, p);
  (void)from_float<State>(to_float(State{}));
}

template <activation_element T, gated_delta_state_element State>
void use_gated_delta(const gated_delta_args<T, State>& a, const gated_delta_options& o, const varlen_batch& b,
                     const prefill_slots& s, const recurrent_slots& r) {
  (void)gated_delta_chunked_prefill_host(a, o, b, s);
  (void)gated_delta_recurrent_step_host(a, o, b, r);
  (void)shape_of(a, o);
  (void)config_of(a, o, true);
}

template <activation_element T>
void use_conv1d(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& s, std::span<const copy_pair> p) {
  (void)causal_conv1d_prefill_host(a, b, s);
  (void)causal_conv1d_update_host(a, p);
}

void use_all(const varlen_batch& b, const prefill_slots& s, std::span<const copy_pair> p, const recurrent_slots& r,
             const gated_delta_options& o, std::span<const pool_view> pools, std::span<const pool_pair_view> layers,
             const kv_gather_args& kv) {
  use_mamba2(mamba2_args<float>{}, b, s, p);
  use_mamba2(mamba2_args<bfloat16>{}, b, s, p);
  use_gated_delta(gated_delta_args<float>{}, o, b, s, r);
  use_gated_delta(gated_delta_args<bfloat16>{}, o, b, s, r);
  use_gated_delta(gated_delta_args<float, bfloat16>{}, o, b, s, r);
  use_gated_delta(gated_delta_args<bfloat16, bfloat16>{}, o, b, s, r);
  use_gated_delta(gated_delta_args<float, float16>{}, o, b, s, r);
  use_gated_delta(gated_delta_args<bfloat16, float16>{}, o, b, s, r);
  use_mamba2_lossy(mamba2_args<float, bfloat16>{}, p);
  use_mamba2_lossy(mamba2_args<bfloat16, float16>{}, p);
  use_conv1d(conv1d_args<float>{}, b, s, p);
  use_conv1d(conv1d_args<bfloat16>{}, b, s, p);
  (void)copy_units_host(pools, p);
  (void)transfer_units_host(layers, p);
  (void)gather_kv_host(kv);
}

} // namespace reprise::ops::strict_check
