// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The recurrent mixers of the example decoder. Their math is the library's: each calls the host
/// implementations in `reprise/ops/` (causal conv1d with conv-window capture, Mamba2 SSD chunked prefill and
/// selective state update, gated-delta chunked prefill and recurrent step) on the engine's slot pools. The
/// mixers add only what a model adds around those kernels: projections, gates and norms.

#include "hybrid/batch.hpp"
#include "hybrid/config.hpp"
#include "hybrid/memory.hpp"
#include "hybrid/weights.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace reprise::example {

/// A gated-delta mixer (Qwen3-Next's Gated DeltaNet): in_proj -> causal conv1d + SiLU over q, k, v ->
/// gated delta rule with L2-normalized q and k -> per-head RMSNorm gated by silu(z) -> out_proj.
class gated_delta_mixer {
public:
  gated_delta_mixer(const decoder_config& c, std::uint32_t ordinal, weight_source& w);

  /// y[t] = mixer(x[t]) for every token of `steps`, advancing each sequence's live slot.
  void forward(pass p, std::span<const float> x, std::span<float> y, std::span<const sequence_step> steps,
               state_memory& states) const;

private:
  const decoder_config* c_;
  std::uint32_t ordinal_;
  std::vector<float> w_in_, conv_weight_, a_log_, dt_bias_, norm_, w_out_;
};

/// A Mamba2 mixer: in_proj -> causal conv1d + SiLU over x, B, C -> SSD (softplus dt, A, D skip) ->
/// RMSNorm gated by silu(z) -> out_proj.
class mamba2_mixer {
public:
  mamba2_mixer(const decoder_config& c, std::uint32_t ordinal, weight_source& w);

  void forward(pass p, std::span<const float> x, std::span<float> y, std::span<const sequence_step> steps,
               state_memory& states) const;

private:
  const decoder_config* c_;
  std::uint32_t ordinal_;
  std::vector<float> w_in_, conv_weight_, conv_bias_, dt_bias_, a_log_, d_skip_, norm_, w_out_;
};

} // namespace reprise::example
