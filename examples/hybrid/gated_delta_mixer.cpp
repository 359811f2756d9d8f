// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "hybrid/recurrent.hpp"

#include "hybrid/kernel_calls.hpp"
#include "hybrid/math.hpp"

#include <reprise/ops/gated_delta.hpp>

#include <cmath>
#include <cstring>

namespace reprise::example {

gated_delta_mixer::gated_delta_mixer(const decoder_config& c, std::uint32_t ordinal, weight_source& w)
    : c_(&c), ordinal_(ordinal) {
  const gated_delta_shape& s = c.delta;
  const std::size_t conv = s.conv_channels(), value = std::size_t{s.value_heads} * s.value_dim;
  // in_proj -> [q k v | z | b | a]
  w_in_ = w.projection(c.d_model, conv + value + 2 * s.value_heads);
  conv_weight_ = w.uniform(conv * s.conv_width, 1.0f / std::sqrt(static_cast<float>(s.conv_width)));
  a_log_ = w.range(s.value_heads, -1.0f, 0.5f);
  dt_bias_ = w.range(s.value_heads, -2.0f, 0.0f);
  norm_ = w.range(s.value_dim, 0.8f, 1.2f);
  w_out_ = w.projection(value, c.d_model);
}

void gated_delta_mixer::forward(pass p, std::span<const float> x, std::span<float> y,
                                std::span<const sequence_step> steps, state_memory& states) const {
  const decoder_config& c = *c_;
  const gated_delta_shape& s = c.delta;
  const detail::varlen_meta m(steps);
  const std::size_t T = static_cast<std::size_t>(m.tokens());
  const std::size_t conv = s.conv_channels(), qk = std::size_t{s.key_heads} * s.key_dim;
  const std::size_t value = std::size_t{s.value_heads} * s.value_dim, HV = s.value_heads;
  const std::size_t width = conv + value + 2 * HV;

  std::vector<float> proj(T * width), pre(T * conv), mixed(T * conv);
  math::linear(x.data(), T, c.d_model, w_in_.data(), width, proj.data());
  for (std::size_t t = 0; t < T; ++t) std::memcpy(&pre[t * conv], &proj[t * width], conv * sizeof(float));
  detail::causal_conv(p, m, pre.data(), static_cast<std::int64_t>(conv), conv_weight_.data(), s.conv_width, nullptr,
              states.delta_conv(ordinal_), states.slots(), mixed.data());

  const std::vector<float> q = detail::columns(mixed, T, conv, 0, qk), k = detail::columns(mixed, T, conv, qk, qk),
                           v = detail::columns(mixed, T, conv, 2 * qk, value);
  std::vector<float> g(T * HV), beta(T * HV), o(T * value);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t h = 0; h < HV; ++h) {
      const float b = proj[t * width + conv + value + h], a = proj[t * width + conv + value + HV + h];
      beta[t * HV + h] = 1.0f / (1.0f + std::exp(-b));
      const float sp = a + dt_bias_[h] > 20.0f ? a + dt_bias_[h] : std::log1p(std::exp(a + dt_bias_[h]));
      g[t * HV + h] = -std::exp(a_log_[h]) * sp;
    }

  const auto rows = static_cast<std::int64_t>(T), hk = static_cast<std::int64_t>(s.key_heads),
             hv = static_cast<std::int64_t>(HV), kd = static_cast<std::int64_t>(s.key_dim),
             vd = static_cast<std::int64_t>(s.value_dim);
  const ops::gated_delta_args<float> args{
      .q = ops::tensor<const float, 3>(q.data(), rows, hk, kd),
      .k = ops::tensor<const float, 3>(k.data(), rows, hk, kd),
      .v = ops::tensor<const float, 3>(v.data(), rows, hv, vd),
      .g = ops::tensor<const float, 2>(g.data(), rows, hv),
      .beta = ops::tensor<const float, 2>(beta.data(), rows, hv),
      .state_pool = ops::tensor<float, 4>(states.delta(ordinal_), states.slots(), hv, kd, vd),
      .out = ops::tensor<float, 3>(o.data(), rows, hv, vd)};
  const ops::gated_delta_options opt{.chunk = s.chunk, .l2norm_qk = true};
  if (p == pass::prefill)
    detail::check(ops::gated_delta_chunked_prefill_host(args, opt, m.batch(), m.slots()), "gated-delta prefill");
  else
    detail::check(ops::gated_delta_recurrent_step_host(args, opt, m.batch(), ops::recurrent_slots{m.in_place}),
                  "gated-delta recurrent step");

  std::vector<float> z = detail::columns(proj, T, width, conv, value);
  detail::gated_head_norm(o.data(), z.data(), T * HV, s.value_dim, norm_.data(), c.rms_eps);
  math::linear(o.data(), T, value, w_out_.data(), c.d_model, y.data());
}

} // namespace reprise::example
