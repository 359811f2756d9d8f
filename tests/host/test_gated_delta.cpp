// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated delta rule, host implementation: chunked prefill (WY form) and recurrent step against an fp64
// sequential recurrence, bitwise resume and captures on the chunk grid, rollback ring, bad input.
#include <reprise/ops/gated_delta.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::ops;

/// Random activations of a packed batch.
struct inputs {
  gated_delta_shape shape;
  std::int64_t tokens = 0;
  std::vector<float> q, k, v, g, beta;

  inputs(const gated_delta_shape& s, std::int64_t t, std::uint32_t seed, bool unit_keys = false) : shape(s), tokens(t) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unif(0.0f, 1.0f);
    const std::size_t nk = std::size_t(t) * s.key_heads * s.key_dim, nv = std::size_t(t) * s.value_heads * s.value_dim;
    // Without in-kernel L2 norm, keys of norm ~1 keep the delta rule contractive (beta |k|^2 <= 1).
    const float kscale = unit_keys ? 1.0f / std::sqrt(float(s.key_dim)) : 1.0f;
    q.resize(nk);
    k.resize(nk);
    v.resize(nv);
    for (auto& x : q) x = normal(rng);
    for (auto& x : k) x = normal(rng) * kscale;
    for (auto& x : v) x = normal(rng);
    g.resize(std::size_t(t) * s.value_heads);
    beta.resize(g.size());
    for (auto& x : g) x = -0.3f * unif(rng) - 0.002f; // decays in [0.74, 0.998]: long and short memory mixed
    for (auto& x : beta) x = 0.05f + 0.9f * unif(rng);
  }
  gated_delta_io<float> io(std::vector<float>& o) const {
    o.assign(std::size_t(tokens) * shape.value_heads * shape.value_dim, 0.0f);
    return {q.data(), k.data(), v.data(), g.data(), beta.data(), o.data(), tokens};
  }
};

std::int64_t matrix_elems(const gated_delta_shape& s) { return std::int64_t{s.value_heads} * s.key_dim * s.value_dim; }

/// A pool of `n` fp32 slots, slot 0 holding a random state (the rest zero).
std::vector<float> make_pool(const gated_delta_shape& s, int n, std::uint32_t seed) {
  std::vector<float> pool(std::size_t(n) * matrix_elems(s), 0.0f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (std::int64_t e = 0; e < matrix_elems(s); ++e) pool[std::size_t(e)] = normal(rng);
  return pool;
}

template <class State>
state_pool<State> pool_of(std::vector<State>& p, const gated_delta_shape& s) {
  return {p.data(), static_cast<std::int32_t>(p.size() / std::size_t(matrix_elems(s))), matrix_elems(s)};
}

const float* slot_ptr(const std::vector<float>& p, const gated_delta_shape& s, int slot) {
  return p.data() + std::size_t(slot) * matrix_elems(s);
}

/// fp64 sequential recurrence of one sequence (rows [row0, row0 + len)), all value heads, from `init`
/// ([HV, K, V], may be null = zero). Writes o (fp64) and returns the final state.
std::vector<double> reference(const inputs& in, const gated_delta_options& opt, std::int64_t row0, std::int64_t len,
                              const float* init, std::vector<double>& o) {
  const auto& s = in.shape;
  const std::uint32_t H = s.key_heads, HV = s.value_heads, K = s.key_dim, V = s.value_dim;
  std::vector<double> S(std::size_t(matrix_elems(s)), 0.0);
  if (init)
    for (std::size_t e = 0; e < S.size(); ++e) S[e] = init[e];
  o.assign(std::size_t(len) * HV * V, 0.0);
  const double scale = opt.scale != 0.0f ? opt.scale : 1.0 / std::sqrt(double(K));
  std::vector<double> kr(K), qr(K), kv(V);
  for (std::int64_t t = 0; t < len; ++t) {
    const std::int64_t row = row0 + t;
    for (std::uint32_t hv = 0; hv < HV; ++hv) {
      const std::uint32_t h = hv / (HV / H);
      double kn = 0, qn = 0;
      for (std::uint32_t d = 0; d < K; ++d) {
        kr[d] = in.k[(std::size_t(row) * H + h) * K + d];
        qr[d] = in.q[(std::size_t(row) * H + h) * K + d];
        kn += kr[d] * kr[d];
        qn += qr[d] * qr[d];
      }
      if (opt.l2norm_qk)
        for (std::uint32_t d = 0; d < K; ++d) {
          kr[d] /= std::sqrt(kn + opt.l2norm_eps);
          qr[d] /= std::sqrt(qn + opt.l2norm_eps);
        }
      double* Sh = &S[std::size_t(hv) * K * V];
      const double decay = std::exp(double(in.g[std::size_t(row) * HV + hv]));
      const double beta = in.beta[std::size_t(row) * HV + hv];
      for (std::uint32_t c = 0; c < V; ++c) {
        double acc = 0;
        for (std::uint32_t d = 0; d < K; ++d) {
          Sh[d * V + c] *= decay;
          acc += Sh[d * V + c] * kr[d];
        }
        kv[c] = beta * (double(in.v[(std::size_t(row) * HV + hv) * V + c]) - acc);
      }
      for (std::uint32_t d = 0; d < K; ++d)
        for (std::uint32_t c = 0; c < V; ++c) Sh[d * V + c] += kr[d] * kv[c];
      for (std::uint32_t c = 0; c < V; ++c) {
        double acc = 0;
        for (std::uint32_t d = 0; d < K; ++d) acc += Sh[d * V + c] * qr[d];
        o[(std::size_t(t) * HV + hv) * V + c] = scale * acc;
      }
    }
  }
  return S;
}

/// sqrt(sum (a - b)^2 / sum b^2) over n elements.
template <class A>
double rel_rms(const A* a, const double* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

bool bitwise_equal(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

gated_delta_shape small_shape(std::uint32_t chunk) {
  gated_delta_shape s;
  s.key_heads = 2;
  s.value_heads = 4;
  s.key_dim = 32;
  s.value_dim = 16;
  s.chunk = chunk;
  return s;
}

/// Runs one sequence [row0, row0 + len) at absolute `start` from `init_slot` into `final_slot`.
result<void> run_one(const inputs& in, const gated_delta_options& opt, std::vector<float>& o, std::vector<float>& pool,
                     std::int64_t row0, std::int64_t len, std::int64_t start, std::int32_t init_slot,
                     std::int32_t final_slot, const std::vector<state_capture>& caps = {}) {
  // A view of the rows of this sequence as a batch of one.
  gated_delta_io<float> io{in.q.data() + row0 * in.shape.key_heads * in.shape.key_dim,
                           in.k.data() + row0 * in.shape.key_heads * in.shape.key_dim,
                           in.v.data() + row0 * in.shape.value_heads * in.shape.value_dim,
                           in.g.data() + row0 * in.shape.value_heads,
                           in.beta.data() + row0 * in.shape.value_heads,
                           o.data() + row0 * in.shape.value_heads * in.shape.value_dim,
                           len};
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(len)};
  gated_delta_prefill_batch b{1, cu, &start, &init_slot, &final_slot, caps.data(), static_cast<std::int32_t>(caps.size())};
  return gated_delta_chunked_prefill(in.shape, opt, io, b, pool_of(pool, in.shape));
}

} // namespace

TEST_CASE_TEMPLATE("chunked prefill matches the fp64 recurrence (varlen, unaligned starts, captures)", Chunk,
                   std::integral_constant<std::uint32_t, 64>, std::integral_constant<std::uint32_t, 32>) {
  const auto shape = small_shape(Chunk::value);
  for (bool l2 : {true, false}) {
    CAPTURE(l2);
    gated_delta_options opt;
    opt.l2norm_qk = l2;
    // Three sequences: fresh at 0, resumed at an unaligned 37 from slot 0, resumed at an aligned 2Q.
    const std::int32_t cu[4] = {0, 150, 150 + 101, 150 + 101 + 70};
    const std::int64_t start[3] = {0, 37, 2 * std::int64_t{Chunk::value}};
    const std::int32_t init[3] = {-1, 0, 0};
    const std::int32_t fin[3] = {1, 2, 3};
    // Captures only on the grid: sequence 0 at Q and 2Q, sequence 1 at the first boundary after 37.
    const std::int64_t q = Chunk::value;
    std::vector<state_capture> caps = {{0, 4, q}, {0, 5, 2 * q}, {1, 6, (37 / q + 1) * q}};
    inputs in(shape, cu[3], 7, !l2);
    std::vector<float> o;
    auto io = in.io(o);
    auto pool = make_pool(shape, 8, 11);
    gated_delta_prefill_batch b{3, cu, start, init, fin, caps.data(), 3};
    REQUIRE(gated_delta_chunked_prefill(shape, opt, io, b, pool_of(pool, shape)).has_value());

    for (int s = 0; s < 3; ++s) {
      CAPTURE(s);
      std::vector<double> ro;
      auto rs = reference(in, opt, cu[s], cu[s + 1] - cu[s], init[s] >= 0 ? slot_ptr(pool, shape, init[s]) : nullptr, ro);
      const std::size_t per_tok = std::size_t(shape.value_heads) * shape.value_dim;
      CHECK(rel_rms(o.data() + cu[s] * per_tok, ro.data(), ro.size()) <= 1e-5);
      CHECK(rel_rms(slot_ptr(pool, shape, fin[s]), rs.data(), rs.size()) <= 1e-5);
    }
    // Captured states against the reference at the same positions.
    for (const auto& c : caps) {
      std::vector<double> ro;
      auto rs = reference(in, opt, cu[c.seq], c.position - start[c.seq],
                          init[c.seq] >= 0 ? slot_ptr(pool, shape, init[c.seq]) : nullptr, ro);
      CHECK(rel_rms(slot_ptr(pool, shape, c.slot), rs.data(), rs.size()) <= 1e-5);
    }
  }
}

TEST_CASE("resume from an fp32 capture at an aligned position is bitwise equal to the uninterrupted run") {
  const auto shape = small_shape(64);
  gated_delta_options opt;
  opt.l2norm_qk = true;
  for (std::int64_t start : {std::int64_t{0}, std::int64_t{37}}) {
    CAPTURE(start);
    const std::int64_t len = 300; // ends unaligned, so the tail ends in a short chunk too
    inputs in(shape, len, 21);
    std::vector<float> o_full(std::size_t(len) * shape.value_heads * shape.value_dim, 0.0f);
    auto pool = make_pool(shape, 8, 5);
    // Uninterrupted run from slot 0 into slot 1, capturing every boundary at 128 and 192.
    REQUIRE(run_one(in, opt, o_full, pool, 0, len, start, 0, 1, {{0, 2, 128}, {0, 3, 192}}).has_value());
    for (auto [slot, at] : {std::pair{2, std::int64_t{128}}, std::pair{3, std::int64_t{192}}}) {
      CAPTURE(at);
      std::vector<float> o_tail(o_full.size(), 0.0f);
      const std::int64_t skip = at - start;
      REQUIRE(run_one(in, opt, o_tail, pool, skip, len - skip, at, slot, 4).has_value());
      const std::size_t per_tok = std::size_t(shape.value_heads) * shape.value_dim;
      CHECK(bitwise_equal(o_tail.data() + skip * per_tok, o_full.data() + skip * per_tok, (len - skip) * per_tok));
      CHECK(bitwise_equal(slot_ptr(pool, shape, 4), slot_ptr(pool, shape, 1), std::size_t(matrix_elems(shape))));
    }
  }
}

TEST_CASE("captures are bitwise the states of the uninterrupted run at their positions") {
  const auto shape = small_shape(32);
  gated_delta_options opt;
  opt.l2norm_qk = true;
  const std::int64_t start = 13, len = 200;
  inputs in(shape, len, 3);
  std::vector<float> o(std::size_t(len) * shape.value_heads * shape.value_dim, 0.0f);
  auto pool = make_pool(shape, 8, 9);
  REQUIRE(run_one(in, opt, o, pool, 0, len, start, 0, 1, {{0, 2, 32}, {0, 3, 96}, {0, 4, 192}}).has_value());
  // The same sequence stopped exactly at each capture position: its final state is the capture, bit for bit.
  for (auto [slot, at] : {std::pair{2, std::int64_t{32}}, std::pair{3, std::int64_t{96}}, std::pair{4, std::int64_t{192}}}) {
    CAPTURE(at);
    std::vector<float> o2(o.size(), 0.0f);
    REQUIRE(run_one(in, opt, o2, pool, 0, at - start, start, 0, 5).has_value());
    CHECK(bitwise_equal(slot_ptr(pool, shape, 5), slot_ptr(pool, shape, slot), std::size_t(matrix_elems(shape))));
  }
}

TEST_CASE("resume at an unaligned position or from a bf16 state stays within tolerance") {
  const auto shape = small_shape(64);
  gated_delta_options opt;
  opt.l2norm_qk = true;
  const std::int64_t len = 260;
  inputs in(shape, len, 44);
  std::vector<float> o_full(std::size_t(len) * shape.value_heads * shape.value_dim, 0.0f);
  auto pool = make_pool(shape, 8, 1);
  REQUIRE(run_one(in, opt, o_full, pool, 0, len, 0, 0, 1, {{0, 2, 128}}).has_value());
  const std::size_t per_tok = std::size_t(shape.value_heads) * shape.value_dim;
  const std::size_t m = std::size_t(matrix_elems(shape));
  std::vector<double> full_state(slot_ptr(pool, shape, 1), slot_ptr(pool, shape, 1) + m);
  std::vector<double> full_out(o_full.begin(), o_full.end());

  SUBCASE("unaligned: stop at 100, continue from the fp32 state") {
    std::vector<float> o2(o_full.size(), 0.0f);
    REQUIRE(run_one(in, opt, o2, pool, 0, 100, 0, 0, 3).has_value());
    REQUIRE(run_one(in, opt, o2, pool, 100, len - 100, 100, 3, 4).has_value());
    // Different chunk boundaries change the rounding, not the math.
    CHECK(rel_rms(o2.data() + 100 * per_tok, full_out.data() + 100 * per_tok, (len - 100) * per_tok) <= 1e-5);
    CHECK(rel_rms(slot_ptr(pool, shape, 4), full_state.data(), m) <= 1e-5);
  }
  SUBCASE("bf16 state: the capture rounded to bf16, continued in a bf16 pool") {
    std::vector<gdn::bf16> bpool(pool.size());
    for (std::size_t e = 0; e < pool.size(); ++e) bpool[e] = gdn::to_bf16(pool[e]);
    auto bshape = shape;
    bshape.state_type = dtype::bf16;
    std::vector<float> o2(o_full.size(), 0.0f);
    const std::int64_t skip = 128;
    gated_delta_io<float> io{in.q.data() + skip * shape.key_heads * shape.key_dim,
                             in.k.data() + skip * shape.key_heads * shape.key_dim,
                             in.v.data() + skip * per_tok, in.g.data() + skip * shape.value_heads,
                             in.beta.data() + skip * shape.value_heads, o2.data() + skip * per_tok, len - skip};
    const std::int32_t cu[2] = {0, static_cast<std::int32_t>(len - skip)};
    const std::int32_t init = 2, fin = 4;
    gated_delta_prefill_batch b{1, cu, &skip, &init, &fin, nullptr, 0};
    REQUIRE(gated_delta_chunked_prefill(bshape, opt, io, b, state_pool<gdn::bf16>{bpool.data(), 8, std::int64_t(m)}).has_value());
    std::vector<float> fin_state(m);
    for (std::size_t e = 0; e < m; ++e) fin_state[e] = gdn::to_float(bpool[4 * m + e]);
    // bf16 keeps 8 significant bits: one rounding of the state is a relative error of at most 2^-9 per
    // element; the decays shrink it over the 132 tokens that follow, the final store adds one more.
    const double bf16_unit = std::ldexp(1.0, -8);
    const double out_err = rel_rms(o2.data() + skip * per_tok, full_out.data() + skip * per_tok, (len - skip) * per_tok);
    const double state_err = rel_rms(fin_state.data(), full_state.data(), m);
    CHECK(out_err <= bf16_unit);
    CHECK(state_err <= bf16_unit);
    CHECK(out_err > 1e-6); // the bf16 path really ran: it is not bitwise the fp32 one
  }
}

TEST_CASE("bf16 inputs: chunked prefill matches the fp64 recurrence on the same rounded inputs") {
  const auto shape = small_shape(64);
  gated_delta_options opt;
  opt.l2norm_qk = true;
  const std::int64_t len = 140;
  inputs in(shape, len, 99);
  // Round the activations to bf16 once; the reference sees the same values.
  std::vector<gdn::bf16> bq(in.q.size()), bk(in.k.size()), bv(in.v.size());
  for (std::size_t i = 0; i < bq.size(); ++i) in.q[i] = gdn::to_float(bq[i] = gdn::to_bf16(in.q[i]));
  for (std::size_t i = 0; i < bk.size(); ++i) in.k[i] = gdn::to_float(bk[i] = gdn::to_bf16(in.k[i]));
  for (std::size_t i = 0; i < bv.size(); ++i) in.v[i] = gdn::to_float(bv[i] = gdn::to_bf16(in.v[i]));
  std::vector<gdn::bf16> o(std::size_t(len) * shape.value_heads * shape.value_dim, gdn::bf16{0});
  auto pool = make_pool(shape, 2, 4);
  gated_delta_io<gdn::bf16> io{bq.data(), bk.data(), bv.data(), in.g.data(), in.beta.data(), o.data(), len};
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(len)};
  const std::int64_t start = 0;
  const std::int32_t init = 0, fin = 1;
  gated_delta_prefill_batch b{1, cu, &start, &init, &fin, nullptr, 0};
  REQUIRE(gated_delta_chunked_prefill(shape, opt, io, b, pool_of(pool, shape)).has_value());
  std::vector<double> ro;
  auto rs = reference(in, opt, 0, len, slot_ptr(pool, shape, 0), ro);
  CHECK(rel_rms(slot_ptr(pool, shape, 1), rs.data(), rs.size()) <= 1e-5);
  std::vector<float> of(o.size());
  for (std::size_t i = 0; i < o.size(); ++i) of[i] = gdn::to_float(o[i]);
  CHECK(rel_rms(of.data(), ro.data(), ro.size()) <= std::ldexp(1.0, -8)); // only the output store rounds
}

TEST_CASE("recurrent step matches the fp64 recurrence (decode and multi-token verification)") {
  const auto shape = small_shape(64);
  for (bool l2 : {true, false}) {
    CAPTURE(l2);
    gated_delta_options opt;
    opt.l2norm_qk = l2;
    // Three sequences with 1, 4 and 3 tokens; the second is a padding row.
    const std::int32_t cu[4] = {0, 1, 5, 8};
    inputs in(shape, 8, 17, !l2);
    std::vector<float> o;
    auto io = in.io(o);
    std::fill(o.begin(), o.end(), 42.0f);
    auto pool = make_pool(shape, 6, 8);
    std::copy_n(pool.begin(), matrix_elems(shape), pool.begin() + 2 * matrix_elems(shape)); // slot 2 = slot 0
    const std::int32_t src[3] = {0, -1, 2}, dst[3] = {0, 4, 3};
    const auto before = pool;
    gated_delta_step_batch b{3, cu, nullptr, src, dst, nullptr, 0};
    REQUIRE(gated_delta_recurrent_step(shape, opt, io, b, pool_of(pool, shape)).has_value());
    const std::size_t per_tok = std::size_t(shape.value_heads) * shape.value_dim;
    for (int s : {0, 2}) {
      CAPTURE(s);
      std::vector<double> ro;
      auto rs = reference(in, opt, cu[s], cu[s + 1] - cu[s], slot_ptr(before, shape, 0), ro);
      CHECK(rel_rms(o.data() + cu[s] * per_tok, ro.data(), ro.size()) <= 1e-5);
      CHECK(rel_rms(slot_ptr(pool, shape, dst[s]), rs.data(), rs.size()) <= 1e-5);
    }
    // The padding row wrote nothing: its outputs and its destination slot are as they were.
    for (std::size_t i = cu[1] * per_tok; i < cu[2] * per_tok; ++i) REQUIRE(o[i] == 42.0f);
    CHECK(bitwise_equal(slot_ptr(pool, shape, 4), slot_ptr(before, shape, 4), std::size_t(matrix_elems(shape))));
  }
}

TEST_CASE("rollback ring holds the state k tokens back exactly") {
  const auto shape = small_shape(64);
  gated_delta_options opt;
  opt.l2norm_qk = true;
  const std::int64_t n = 5, p0 = 1000;
  const std::int32_t R = 8;
  inputs in(shape, n, 31);
  std::vector<float> o;
  auto io = in.io(o);
  auto pool = make_pool(shape, 2 + R, 12);
  std::vector<std::int32_t> ring(R);
  for (int r = 0; r < R; ++r) ring[r] = 2 + r;
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(n)};
  const std::int32_t src = 0, dst = 1;
  const auto before = pool;
  gated_delta_step_batch b{1, cu, &p0, &src, &dst, ring.data(), R};
  REQUIRE(gated_delta_recurrent_step(shape, opt, io, b, pool_of(pool, shape)).has_value());
  const std::size_t m = std::size_t(matrix_elems(shape));
  // Rolling back k of the n verified tokens = the state after n - k tokens, which a step over only the first
  // n - k tokens produces bit for bit.
  for (std::int64_t k = 0; k < n; ++k) {
    CAPTURE(k);
    const std::int64_t keep = n - k;
    auto scratch = before;
    std::vector<float> o2(o.size(), 0.0f);
    gated_delta_io<float> io2{in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o2.data(), keep};
    const std::int32_t cu2[2] = {0, static_cast<std::int32_t>(keep)};
    const std::int32_t dst2 = 1;
    gated_delta_step_batch b2{1, cu2, &p0, &src, &dst2, nullptr, 0};
    REQUIRE(gated_delta_recurrent_step(shape, opt, io2, b2, pool_of(scratch, shape)).has_value());
    const std::int32_t slot = ring[ring_index(p0 + keep, R)];
    CHECK(bitwise_equal(slot_ptr(pool, shape, slot), slot_ptr(scratch, shape, 1), m));
  }
  CHECK(bitwise_equal(slot_ptr(pool, shape, ring[ring_index(p0 + n, R)]), slot_ptr(pool, shape, 1), m));
  // Positions not reached this call keep their old contents (the ring holds earlier steps' states).
  CHECK(bitwise_equal(slot_ptr(pool, shape, ring[ring_index(p0, R)]), slot_ptr(before, shape, ring[ring_index(p0, R)]), m));
}

TEST_CASE("bad shapes, slots and captures return an errc and write nothing") {
  const auto shape = small_shape(64);
  gated_delta_options opt;
  const std::int64_t len = 130;
  inputs in(shape, len, 2);
  std::vector<float> o(std::size_t(len) * shape.value_heads * shape.value_dim, 7.0f);
  gated_delta_io<float> io{in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o.data(), len};
  auto pool = make_pool(shape, 4, 3);
  const auto pool_before = pool;
  const auto o_before = o;
  std::int32_t cu[2] = {0, static_cast<std::int32_t>(len)};
  std::int64_t start = 0;
  std::int32_t init = 0, fin = 1;
  std::vector<state_capture> caps = {{0, 2, 64}};

  auto prefill = [&](const gated_delta_shape& s) {
    gated_delta_prefill_batch b{1, cu, &start, &init, &fin, caps.data(), static_cast<std::int32_t>(caps.size())};
    return gated_delta_chunked_prefill(s, opt, io, b, pool_of(pool, shape)).error();
  };
  auto unchanged = [&] { return pool == pool_before && o == o_before; };

  SUBCASE("shapes") {
    auto s = shape;
    s.value_heads = 3; // not a multiple of key_heads
    CHECK(prefill(s) == errc::invalid_argument);
    s = shape;
    s.chunk = 128;
    CHECK(prefill(s) == errc::unsupported_config);
    s = shape;
    s.state_type = dtype::bf16; // the pool is fp32
    CHECK(prefill(s) == errc::invalid_argument);
    s = shape;
    s.key_dim = 0;
    CHECK(prefill(s) == errc::invalid_argument);
  }
  SUBCASE("token counts") {
    cu[1] = static_cast<std::int32_t>(len - 1);
    CHECK(prefill(shape) == errc::size_mismatch);
  }
  SUBCASE("slots") {
    init = 4;
    CHECK(prefill(shape) == errc::out_of_range);
    init = 0;
    fin = 9;
    CHECK(prefill(shape) == errc::out_of_range);
    fin = 2; // the capture slot is also the final slot
    CHECK(prefill(shape) == errc::overlapping_pairs);
  }
  SUBCASE("captures") {
    caps = {{0, 2, 60}};
    CHECK(prefill(shape) == errc::misaligned);
    caps = {{0, 2, 192}}; // beyond the end of the sequence
    CHECK(prefill(shape) == errc::out_of_range);
    caps = {{0, 2, 0}}; // the start itself is not a capture
    CHECK(prefill(shape) == errc::out_of_range);
    caps = {{1, 2, 64}};
    CHECK(prefill(shape) == errc::out_of_range);
    caps = {{0, 2, 128}, {0, 3, 64}};
    CHECK(prefill(shape) == errc::invalid_argument);
    caps = {{0, 4, 64}};
    CHECK(prefill(shape) == errc::out_of_range);
  }
  SUBCASE("recurrent step") {
    const std::int32_t src = 0, dst_bad = 4, ring_bad[2] = {2, 4};
    const std::int32_t cu1[2] = {0, 1};
    gated_delta_io<float> io1 = io;
    io1.num_tokens = 1;
    gated_delta_step_batch b{1, cu1, &start, &src, &dst_bad, nullptr, 0};
    CHECK(gated_delta_recurrent_step(shape, opt, io1, b, pool_of(pool, shape)).error() == errc::out_of_range);
    const std::int32_t dst = 1;
    b.dst_slot = &dst;
    b.ring_slots = ring_bad;
    b.ring_size = 2;
    CHECK(gated_delta_recurrent_step(shape, opt, io1, b, pool_of(pool, shape)).error() == errc::out_of_range);
    const std::int32_t ring_dup[2] = {2, 1}; // the ring overlaps the destination
    b.ring_slots = ring_dup;
    CHECK(gated_delta_recurrent_step(shape, opt, io1, b, pool_of(pool, shape)).error() == errc::overlapping_pairs);
    b.ring_slots = nullptr;
    io1.num_tokens = 2;
    CHECK(gated_delta_recurrent_step(shape, opt, io1, b, pool_of(pool, shape)).error() == errc::size_mismatch);
  }
  SUBCASE("another sequence's live slot is not a capture target") {
    const std::int32_t cu2[3] = {0, 64, static_cast<std::int32_t>(len)};
    const std::int64_t st2[2] = {0, 0};
    const std::int32_t in2[2] = {0, 1}, fin2[2] = {0, 3};
    const state_capture cap2[1] = {{0, 1, 64}}; // sequence 1 reads slot 1
    gated_delta_prefill_batch b{2, cu2, st2, in2, fin2, cap2, 1};
    CHECK(gated_delta_chunked_prefill(shape, opt, io, b, pool_of(pool, shape)).error() == errc::overlapping_pairs);
  }
  CHECK(unchanged());
}
