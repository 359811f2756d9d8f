// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Gated-delta test operands and the fp64 sequential recurrence the kernels are checked against (shared by
// the host and GPU tests).
#include <reprise/ops/gated_delta.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace reprise::testing {

/// Head counts and dimensions of a test layer.
struct gd_dims {
  std::int64_t h, hv, k, v;
};

/// Seeded operands of a packed batch of `tokens` rows and a pool of `slots` fp32 states (slot 0 random, the
/// rest zero).
template <class T>
struct gd_problem {
  gd_dims d;
  std::int64_t tokens, slots;
  std::vector<T> q, k, v, out;
  std::vector<float> g, beta, pool;

  gd_problem(gd_dims dims, std::int64_t t, std::int64_t n_slots, std::uint64_t seed, bool unit_keys = false)
      : d(dims), tokens(t), slots(n_slots) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unif(0.0f, 1.0f);
    // Without in-kernel L2 norm, keys of norm ~1 keep the delta rule contractive (beta |k|^2 <= 1).
    const float kscale = unit_keys ? 1.0f / std::sqrt(float(d.k)) : 1.0f;
    q.resize(std::size_t(t * d.h * d.k));
    k.resize(q.size());
    v.resize(std::size_t(t * d.hv * d.v));
    out.assign(v.size(), ops::from_float<T>(0.0f));
    for (auto& x : q) x = ops::from_float<T>(normal(rng));
    for (auto& x : k) x = ops::from_float<T>(normal(rng) * kscale);
    for (auto& x : v) x = ops::from_float<T>(normal(rng));
    g.resize(std::size_t(t * d.hv));
    beta.resize(g.size());
    for (auto& x : g) x = -0.3f * unif(rng) - 0.002f; // decays in [0.74, 0.998]: long and short memory mixed
    for (auto& x : beta) x = 0.05f + 0.9f * unif(rng);
    pool.assign(std::size_t(n_slots) * matrix(), 0.0f);
    std::normal_distribution<float> state(0.0f, 0.3f);
    for (std::size_t e = 0; e < matrix() && n_slots > 0; ++e) pool[e] = state(rng);
  }

  /// The same operands in another activation type (values converted through fp32).
  template <class U>
  explicit gd_problem(const gd_problem<U>& o)
      : d(o.d), tokens(o.tokens), slots(o.slots), q(convert(o.q)), k(convert(o.k)), v(convert(o.v)),
        out(convert(o.out)), g(o.g), beta(o.beta), pool(o.pool) {}

  std::size_t matrix() const { return std::size_t(d.hv * d.k * d.v); }
  std::size_t out_row() const { return std::size_t(d.hv * d.v); }
  const float* slot_ptr(std::int64_t s) const { return pool.data() + std::size_t(s) * matrix(); }

  /// Views of rows [row0, row0 + len) (all rows by default) and the whole pool.
  ops::gated_delta_args<T> args(std::int64_t row0 = 0, std::int64_t len = -1) {
    if (len < 0) len = tokens - row0;
    const std::size_t kr = std::size_t(row0 * d.h * d.k), vr = std::size_t(row0 * d.hv * d.v),
                      gr = std::size_t(row0 * d.hv);
    return {ops::tensor<const T, 3>(q.data() + kr, len, d.h, d.k),
            ops::tensor<const T, 3>(k.data() + kr, len, d.h, d.k),
            ops::tensor<const T, 3>(v.data() + vr, len, d.hv, d.v),
            ops::tensor<const float, 2>(g.data() + gr, len, d.hv),
            ops::tensor<const float, 2>(beta.data() + gr, len, d.hv),
            ops::tensor<float, 4>(pool.data(), slots, d.hv, d.k, d.v),
            ops::tensor<T, 3>(out.data() + vr, len, d.hv, d.v)};
  }

  /// Outputs of rows [row0, row0 + len), widened.
  std::vector<double> outputs(std::int64_t row0, std::int64_t len) const {
    std::vector<double> r(std::size_t(len) * out_row());
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = ops::to_float(out[std::size_t(row0) * out_row() + i]);
    return r;
  }

  /// Rounds q, k and v to bf16 in place, so that a bf16 run and this fp32 problem see the same values.
  void round_inputs_to_bf16() {
    for (auto* vec : {&q, &k, &v})
      for (auto& x : *vec) x = ops::from_float<T>(ops::to_float(ops::from_float<ops::bfloat16>(ops::to_float(x))));
  }

private:
  template <class U>
  static std::vector<T> convert(const std::vector<U>& in) {
    std::vector<T> r(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) r[i] = ops::from_float<T>(ops::to_float(in[i]));
    return r;
  }
};

/// fp64 sequential recurrence of rows [row0, row0 + len) as one sequence, all value heads, from `init`
/// ([HV, K, V] fp32, or null for the zero state). Writes the fp64 outputs to `o`, returns the final state.
template <class T>
std::vector<double> gd_reference(const gd_problem<T>& p, const ops::gated_delta_options& opt, std::int64_t row0,
                                 std::int64_t len, const float* init, std::vector<double>& o) {
  const auto [H, HV, K, V] = p.d;
  std::vector<double> S(p.matrix(), 0.0);
  if (init)
    for (std::size_t e = 0; e < S.size(); ++e) S[e] = init[e];
  o.assign(std::size_t(len) * p.out_row(), 0.0);
  const double scale = opt.scale != 0.0f ? opt.scale : 1.0 / std::sqrt(double(K));
  std::vector<double> kr(static_cast<std::size_t>(K)), qr(static_cast<std::size_t>(K)), u(static_cast<std::size_t>(V));
  for (std::int64_t t = 0; t < len; ++t) {
    const std::int64_t row = row0 + t;
    for (std::int64_t hv = 0; hv < HV; ++hv) {
      const std::int64_t h = hv / (HV / H);
      double kn = 0, qn = 0;
      for (std::int64_t x = 0; x < K; ++x) {
        kr[x] = ops::to_float(p.k[std::size_t((row * H + h) * K + x)]);
        qr[x] = ops::to_float(p.q[std::size_t((row * H + h) * K + x)]);
        kn += kr[x] * kr[x];
        qn += qr[x] * qr[x];
      }
      if (opt.l2norm_qk)
        for (std::int64_t x = 0; x < K; ++x) {
          kr[x] /= std::sqrt(kn + opt.l2norm_eps);
          qr[x] /= std::sqrt(qn + opt.l2norm_eps);
        }
      double* Sh = &S[std::size_t(hv * K * V)];
      const double decay = std::exp(double(p.g[std::size_t(row * HV + hv)]));
      const double beta = p.beta[std::size_t(row * HV + hv)];
      for (std::int64_t c = 0; c < V; ++c) {
        double acc = 0;
        for (std::int64_t x = 0; x < K; ++x) {
          Sh[x * V + c] *= decay;
          acc += Sh[x * V + c] * kr[x];
        }
        u[c] = beta * (double(ops::to_float(p.v[std::size_t((row * HV + hv) * V + c)])) - acc);
      }
      for (std::int64_t x = 0; x < K; ++x)
        for (std::int64_t c = 0; c < V; ++c) Sh[x * V + c] += kr[x] * u[c];
      for (std::int64_t c = 0; c < V; ++c) {
        double acc = 0;
        for (std::int64_t x = 0; x < K; ++x) acc += Sh[x * V + c] * qr[x];
        o[std::size_t((t * HV + hv) * V + c)] = scale * acc;
      }
    }
  }
  return S;
}

} // namespace reprise::testing
