// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Operands of a Mamba2 layer for tests (host and GPU) and the fp64 sequential recurrence they are checked
// against.
#include <reprise/ops/mamba2.hpp>

#include "support/ops_testing.hpp"

#include <cmath>
#include <vector>

namespace reprise::testing {

/// Host operands of one Mamba2 layer over `rows` rows and a pool of `slots` fp32 states.
template <class T>
struct mamba2_case {
  std::int64_t rows, H, P, G, N, slots;
  std::vector<T> x, dt, B, C, z, y;
  std::vector<float> A, D, dt_bias, pool;
  bool with_z = true;

  mamba2_case(random_source& rng, std::int64_t rows_, std::int64_t H_, std::int64_t P_, std::int64_t G_,
              std::int64_t N_, std::int64_t slots_)
      : rows(rows_), H(H_), P(P_), G(G_), N(N_), slots(slots_), x(rng.values<T>(rows * H * P, -1, 1)),
        dt(rng.values<T>(rows * H, -4.0f, -1.0f)), B(rng.values<T>(rows * G * N, -1, 1)),
        C(rng.values<T>(rows * G * N, -1, 1)), z(rng.values<T>(rows * H * P, -2, 2)),
        y(static_cast<std::size_t>(rows * H * P), ops::from_float<T>(-3.0f)), A(rng.values<float>(H, -1.0f, -0.2f)),
        D(rng.values<float>(H, 0.5f, 1.5f)), dt_bias(rng.values<float>(H, -0.5f, 0.5f)),
        pool(rng.values<float>(slots * H * P * N, -0.5f, 0.5f)) {}

  std::size_t state_elems() const { return static_cast<std::size_t>(H * P * N); }
  float* slot(std::int64_t s) { return pool.data() + s * H * P * N; }

  ops::mamba2_args<T> args(std::int64_t chunk) {
    ops::mamba2_args<T> a{cview(x, rows, H, P), cview(dt, rows, H), cview(A, H), cview(B, rows, G, N),
                          cview(C, rows, G, N), cview(D, H), cview(dt_bias, H),
                          with_z ? cview(z, rows, H, P) : ops::tensor<const T, 3>{},
                          view(pool, slots, H, P, N), view(y, rows, H, P)};
    a.chunk = chunk;
    return a;
  }

  /// The tokens [first, first + count) as a case of their own (same weights and pool).
  mamba2_case slice(std::int64_t first, std::int64_t count) const {
    mamba2_case c = *this;
    c.rows = count;
    auto cut = [&](auto& v, const auto& src, std::int64_t per_row) {
      v.assign(src.begin() + first * per_row, src.begin() + (first + count) * per_row);
    };
    cut(c.x, x, H * P);
    cut(c.dt, dt, H);
    cut(c.B, B, G * N);
    cut(c.C, C, G * N);
    cut(c.z, z, H * P);
    cut(c.y, y, H * P);
    return c;
  }
};

/// fp64 sequential recurrence of one sequence: tokens [t0, t0 + len) of `k`, from state `S` ([H, P, N],
/// updated in place). Returns y [len, H, P].
template <class T>
std::vector<double> reference_mamba2(const mamba2_case<T>& k, std::int64_t t0, std::int64_t len,
                                     std::vector<double>& S, ops::dt_transform mode = {}) {
  const std::int64_t H = k.H, P = k.P, N = k.N, hpg = H / k.G;
  std::vector<double> y(static_cast<std::size_t>(len * H * P));
  for (std::int64_t t = 0; t < len; ++t) {
    const std::int64_t r = t0 + t;
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / hpg;
      double dt = double(ops::to_float(k.dt[r * H + h])) + k.dt_bias[h];
      if (mode.softplus) dt = dt > 20 ? dt : std::log1p(std::exp(dt));
      dt = std::min(std::max(dt, double(mode.min)), double(mode.max));
      const double decay = std::exp(dt * k.A[h]);
      for (std::int64_t p = 0; p < P; ++p) {
        const double x = ops::to_float(k.x[(r * H + h) * P + p]);
        double acc = 0;
        for (std::int64_t n = 0; n < N; ++n) {
          double& s = S[(h * P + p) * N + n];
          s = s * decay + dt * x * double(ops::to_float(k.B[(r * k.G + g) * N + n]));
          acc += s * double(ops::to_float(k.C[(r * k.G + g) * N + n]));
        }
        double v = acc + double(k.D[h]) * x;
        if (k.with_z) {
          const double z = ops::to_float(k.z[(r * H + h) * P + p]);
          v *= z / (1 + std::exp(-z));
        }
        y[(t * H + h) * P + p] = v;
      }
    }
  }
  return y;
}

} // namespace reprise::testing
