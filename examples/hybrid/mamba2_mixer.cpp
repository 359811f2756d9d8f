// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "hybrid/recurrent.hpp"

#include "hybrid/kernel_calls.hpp"
#include "hybrid/math.hpp"

#include <reprise/ops/mamba2.hpp>

#include <cmath>
#include <cstring>

namespace reprise::example {

mamba2_mixer::mamba2_mixer(const decoder_config& c, std::uint32_t ordinal, weight_source& w)
    : c_(&c), ordinal_(ordinal) {
  const mamba2_shape& s = c.ssm;
  const std::size_t inner = std::size_t{s.heads} * s.head_dim, conv = s.conv_channels();
  // in_proj -> [z | x B C | dt]
  w_in_ = w.projection(c.d_model, inner + conv + s.heads);
  conv_weight_ = w.uniform(conv * s.conv_width, 1.0f / std::sqrt(static_cast<float>(s.conv_width)));
  conv_bias_ = w.uniform(conv, 0.1f);
  dt_bias_ = w.range(s.heads, -3.0f, -1.0f);
  a_log_ = w.range(s.heads, 0.0f, 1.5f);
  d_skip_ = w.range(s.heads, 0.5f, 1.5f);
  norm_ = w.range(inner, 0.8f, 1.2f);
  w_out_ = w.projection(inner, c.d_model);
}

void mamba2_mixer::forward(pass p, std::span<const float> x, std::span<float> y, std::span<const sequence_step> steps,
                           state_memory& states) const {
  const decoder_config& c = *c_;
  const mamba2_shape& s = c.ssm;
  const detail::varlen_meta m(steps);
  const std::size_t T = static_cast<std::size_t>(m.tokens());
  const std::size_t H = s.heads, P = s.head_dim, G = s.groups, N = s.state_dim;
  const std::size_t inner = H * P, conv = s.conv_channels(), width = inner + conv + H;

  std::vector<float> proj(T * width), mixed(T * conv);
  math::linear(x.data(), T, c.d_model, w_in_.data(), width, proj.data());
  const std::vector<float> pre = detail::columns(proj, T, width, inner, conv);
  detail::causal_conv(p, m, pre.data(), static_cast<std::int64_t>(conv), conv_weight_.data(), s.conv_width,
                      conv_bias_.data(), states.ssm_conv(ordinal_), states.slots(), mixed.data());

  const std::vector<float> xs = detail::columns(mixed, T, conv, 0, inner),
                           bs = detail::columns(mixed, T, conv, inner, G * N),
                           cs = detail::columns(mixed, T, conv, inner + G * N, G * N),
                           z = detail::columns(proj, T, width, 0, inner),
                           dt = detail::columns(proj, T, width, inner + conv, H);
  std::vector<float> a(H), out(T * inner);
  for (std::size_t h = 0; h < H; ++h) a[h] = -std::exp(a_log_[h]);

  const auto rows = static_cast<std::int64_t>(T), h = static_cast<std::int64_t>(H),
             pp = static_cast<std::int64_t>(P), g = static_cast<std::int64_t>(G), n = static_cast<std::int64_t>(N);
  const ops::mamba2_args<float> args{
      .x = ops::tensor<const float, 3>(xs.data(), rows, h, pp),
      .dt = ops::tensor<const float, 2>(dt.data(), rows, h),
      .A = ops::tensor<const float, 1>(a.data(), h),
      .B = ops::tensor<const float, 3>(bs.data(), rows, g, n),
      .C = ops::tensor<const float, 3>(cs.data(), rows, g, n),
      .D = ops::tensor<const float, 1>(d_skip_.data(), h),
      .dt_bias = ops::tensor<const float, 1>(dt_bias_.data(), h),
      .z = ops::tensor<const float, 3>(z.data(), rows, h, pp), // y = (S C + D x) * silu(z)
      .state_pool = ops::tensor<float, 4>(states.ssm(ordinal_), states.slots(), h, pp, n),
      .y = ops::tensor<float, 3>(out.data(), rows, h, pp),
      .chunk = s.chunk};
  if (p == pass::prefill) detail::check(ops::mamba2_ssd_prefill_host(args, m.batch(), m.slots()), "Mamba2 SSD prefill");
  else detail::check(ops::mamba2_state_update_host(args, m.in_place), "Mamba2 selective state update");

  // Mamba2's gated RMSNorm: the gate is already applied by the kernel, the norm spans the whole inner width.
  math::rms_norm(out.data(), T, inner, norm_.data(), c.rms_eps, out.data());
  math::linear(out.data(), T, inner, w_out_.data(), c.d_model, y.data());
}

} // namespace reprise::example
