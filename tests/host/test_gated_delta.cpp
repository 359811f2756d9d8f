// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated delta rule, host implementation: chunked prefill (WY form) and recurrent step against an fp64
// sequential recurrence, bitwise resume and captures on the chunk grid, rollback ring, bad input.
#include <reprise/ops/gated_delta.hpp>

#include "support/gated_delta_testing.hpp"
#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::ops;
using reprise::testing::bitwise_equal;
using reprise::testing::gd_dims;
using reprise::testing::gd_problem;
using reprise::testing::gd_reference;
using reprise::testing::relative_rms;

constexpr gd_dims small{2, 4, 32, 16};

template <class T>
std::vector<double> slot_values(const gd_problem<T>& p, int slot) {
  const auto* b = p.slot_ptr(slot);
  return {b, b + p.matrix()};
}

/// Runs one sequence (rows [row0, row0 + len) of `p`) at absolute `start` from `init` into `fin`.
result<void> run_one(gd_problem<float>& p, const gated_delta_options& o, std::int64_t row0, std::int64_t len,
                     std::int64_t start, std::int32_t init, std::int32_t fin, std::vector<capture_point> caps = {}) {
  const auto a = p.args(row0, len);
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(len)};
  const std::int32_t in[1] = {init}, out[1] = {fin};
  const varlen_batch b{cu, std::span<const std::int64_t>(&start, 1)};
  return gated_delta_chunked_prefill_host(a, o, b, prefill_slots{in, out, caps});
}

} // namespace

TEST_CASE_TEMPLATE("chunked prefill matches the fp64 recurrence (varlen, unaligned starts, captures)", Chunk,
                   std::integral_constant<std::uint32_t, 64>, std::integral_constant<std::uint32_t, 32>) {
  const std::int64_t Q = Chunk::value;
  for (bool l2 : {true, false}) {
    CAPTURE(l2);
    gated_delta_options o;
    o.chunk = Chunk::value;
    o.l2norm_qk = l2;
    // Three sequences: fresh at 0, resumed at an unaligned 37 from slot 0, resumed at an aligned 2Q.
    const std::vector<std::int32_t> cu = {0, 150, 150 + 101, 150 + 101 + 70};
    const std::vector<std::int64_t> start = {0, 37, 2 * Q};
    const std::vector<std::int32_t> init = {-1, 0, 0}, fin = {1, 2, 3};
    const std::vector<capture_point> caps = {{0, Q, 4}, {0, 2 * Q, 5}, {1, (37 / Q + 1) * Q, 6}};
    gd_problem<float> p(small, cu.back(), 8, 7, !l2);
    const auto pool0 = p.pool;
    REQUIRE(gated_delta_chunked_prefill_host(p.args(), o, varlen_batch{cu, start}, prefill_slots{init, fin, caps}));

    for (std::size_t s = 0; s < 3; ++s) {
      CAPTURE(s);
      std::vector<double> ro;
      const auto rs = gd_reference(p, o, cu[s], cu[s + 1] - cu[s], init[s] >= 0 ? pool0.data() : nullptr, ro);
      CHECK(relative_rms(p.outputs(cu[s], cu[s + 1] - cu[s]), ro) <= 1e-5);
      CHECK(relative_rms(slot_values(p, fin[s]), rs) <= 1e-5);
    }
    for (const auto& c : caps) { // captured states against the reference at the same positions
      std::vector<double> ro;
      const auto rs = gd_reference(p, o, cu[c.sequence], c.position - start[c.sequence],
                                   init[c.sequence] >= 0 ? pool0.data() : nullptr, ro);
      CHECK(relative_rms(slot_values(p, c.slot), rs) <= 1e-5);
    }
  }
}

TEST_CASE("resume from an fp32 capture at an aligned position is bitwise equal to the uninterrupted run") {
  gated_delta_options o;
  o.l2norm_qk = true;
  for (std::int64_t start : {std::int64_t{0}, std::int64_t{37}}) {
    CAPTURE(start);
    const std::int64_t len = 300; // ends unaligned: the tail's last chunk is short too
    gd_problem<float> p(small, len, 8, 21);
    REQUIRE(run_one(p, o, 0, len, start, 0, 1, {{0, 128, 2}, {0, 192, 3}}));
    const auto full_out = p.out;
    for (const auto& capture : {std::pair{2, std::int64_t{128}}, std::pair{3, std::int64_t{192}}}) {
      // Named locals, not a structured binding: clang before 16 cannot capture one in CAPTURE's lambda.
      const int slot = capture.first;
      const std::int64_t at = capture.second;
      CAPTURE(at);
      std::fill(p.out.begin(), p.out.end(), 0.0f);
      const std::int64_t skip = at - start;
      REQUIRE(run_one(p, o, skip, len - skip, at, slot, 4));
      const std::size_t row = p.out_row(), from = std::size_t(skip) * row;
      CHECK(bitwise_equal(p.out.data() + from, full_out.data() + from, full_out.size() - from));
      CHECK(bitwise_equal(p.slot_ptr(4), p.slot_ptr(1), p.matrix()));
    }
  }
}

TEST_CASE("captures are bitwise the states of the uninterrupted run at their positions") {
  gated_delta_options o;
  o.chunk = 32;
  o.l2norm_qk = true;
  const std::int64_t start = 13, len = 200;
  gd_problem<float> p(small, len, 8, 3);
  REQUIRE(run_one(p, o, 0, len, start, 0, 1, {{0, 32, 2}, {0, 96, 3}, {0, 192, 4}}));
  // The same sequence stopped exactly at each capture position: its final state is the capture, bit for bit.
  for (const auto& capture : {std::pair{2, std::int64_t{32}}, std::pair{3, std::int64_t{96}}, std::pair{4, std::int64_t{192}}}) {
    const int slot = capture.first;
    const std::int64_t at = capture.second;
    CAPTURE(at);
    REQUIRE(run_one(p, o, 0, at - start, start, 0, 5));
    CHECK(bitwise_equal(p.slot_ptr(5), p.slot_ptr(slot), p.matrix()));
  }
}

TEST_CASE("resume at an unaligned position or from a bf16 state stays within tolerance") {
  gated_delta_options o;
  o.l2norm_qk = true;
  const std::int64_t len = 260;
  gd_problem<float> p(small, len, 8, 44);
  REQUIRE(run_one(p, o, 0, len, 0, 0, 1, {{0, 128, 2}}));
  const std::vector<double> full_out(p.out.begin(), p.out.end());
  const auto full_state = slot_values(p, 1);
  auto tail = [&](std::int64_t from) {
    std::vector<double> t(full_out.begin() + from * std::int64_t(p.out_row()), full_out.end());
    return t;
  };

  SUBCASE("unaligned: stop at 100, continue from the fp32 state") {
    REQUIRE(run_one(p, o, 0, 100, 0, 0, 3));
    REQUIRE(run_one(p, o, 100, len - 100, 100, 3, 4));
    // Other chunk boundaries change the rounding, not the math.
    CHECK(relative_rms(p.outputs(100, len - 100), tail(100)) <= 1e-5);
    CHECK(relative_rms(slot_values(p, 4), full_state) <= 1e-5);
  }
  SUBCASE("bf16 state: the capture rounded to bf16 and continued in a bf16 pool") {
    std::vector<bfloat16> bpool(p.pool.size());
    for (std::size_t e = 0; e < p.pool.size(); ++e) bpool[e] = from_float<bfloat16>(p.pool[e]);
    auto a = p.args(128, len - 128);
    const gated_delta_args<float, bfloat16> ba{a.q, a.k, a.v, a.g, a.beta,
                                               tensor<bfloat16, 4>(bpool.data(), 8, small.hv, small.k, small.v), a.out};
    const std::int32_t cu[2] = {0, static_cast<std::int32_t>(len - 128)};
    const std::int64_t st[1] = {128};
    const std::int32_t in[1] = {2}, out[1] = {4};
    REQUIRE(gated_delta_chunked_prefill_host(ba, o, varlen_batch{cu, st}, prefill_slots{in, out}));
    std::vector<double> fin_state(p.matrix());
    for (std::size_t e = 0; e < p.matrix(); ++e) fin_state[e] = to_float(bpool[4 * p.matrix() + e]);
    // bf16 keeps 8 significant bits: rounding the state is a relative error of at most 2^-9 per element,
    // which the decays shrink over the 132 tokens that follow; the final store rounds once more.
    const double bf16_unit = std::ldexp(1.0, -8);
    const double out_err = relative_rms(p.outputs(128, len - 128), tail(128));
    CHECK(out_err <= bf16_unit);
    CHECK(relative_rms(fin_state, full_state) <= bf16_unit);
    CHECK(out_err > 1e-6); // the bf16 path really ran: it is not bitwise the fp32 one
  }
}

TEST_CASE("bf16 inputs: chunked prefill matches the fp64 recurrence on the same rounded inputs") {
  gated_delta_options o;
  o.l2norm_qk = true;
  const std::int64_t len = 140;
  gd_problem<float> p(small, len, 2, 99);
  p.round_inputs_to_bf16(); // the fp64 reference sees exactly the bf16 values
  gd_problem<bfloat16> bp(p);
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(len)};
  const std::int64_t st[1] = {0};
  const std::int32_t in[1] = {0}, out[1] = {1};
  REQUIRE(gated_delta_chunked_prefill_host(bp.args(), o, varlen_batch{cu, st}, prefill_slots{in, out}));
  std::vector<double> ro;
  const auto rs = gd_reference(p, o, 0, len, p.pool.data(), ro);
  CHECK(relative_rms(slot_values(bp, 1), rs) <= 1e-5);
  CHECK(relative_rms(bp.outputs(0, len), ro) <= std::ldexp(1.0, -8)); // only the output store rounds
}

TEST_CASE("recurrent step matches the fp64 recurrence (decode and multi-token verification)") {
  for (bool l2 : {true, false}) {
    CAPTURE(l2);
    gated_delta_options o;
    o.l2norm_qk = l2;
    // Three sequences with 1, 4 and 3 tokens; the second is a padding row.
    const std::vector<std::int32_t> cu = {0, 1, 5, 8};
    const std::vector<std::int64_t> start = {10, 20, 30};
    gd_problem<float> p(small, 8, 6, 17, !l2);
    std::fill(p.out.begin(), p.out.end(), 42.0f);
    std::copy_n(p.pool.begin(), p.matrix(), p.pool.begin() + 2 * std::int64_t(p.matrix())); // slot 2 = slot 0
    const auto pool0 = p.pool;
    const std::vector<copy_pair> pairs = {{0, 0}, {-1, 4}, {2, 3}};
    REQUIRE(gated_delta_recurrent_step_host(p.args(), o, varlen_batch{cu, start}, recurrent_slots{pairs}));
    for (std::size_t s : {0u, 2u}) {
      CAPTURE(s);
      std::vector<double> ro;
      const auto rs = gd_reference(p, o, cu[s], cu[s + 1] - cu[s], pool0.data(), ro);
      CHECK(relative_rms(p.outputs(cu[s], cu[s + 1] - cu[s]), ro) <= 1e-5);
      CHECK(relative_rms(slot_values(p, pairs[s].dst), rs) <= 1e-5);
    }
    // The padding row wrote nothing: its outputs and its would-be destination are as they were.
    for (std::size_t i = std::size_t(cu[1]) * p.out_row(); i < std::size_t(cu[2]) * p.out_row(); ++i)
      REQUIRE(p.out[i] == 42.0f);
    CHECK(bitwise_equal(p.slot_ptr(4), pool0.data() + 4 * p.matrix(), p.matrix()));
  }
}

TEST_CASE("rollback ring holds the state k tokens back exactly") {
  gated_delta_options o;
  o.l2norm_qk = true;
  const std::int64_t n = 5, p0 = 1000;
  const std::int32_t R = 8;
  gd_problem<float> p(small, n, 2 + R, 31);
  std::vector<std::int32_t> ring(R);
  for (int r = 0; r < R; ++r) ring[std::size_t(r)] = 2 + r;
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(n)};
  const std::int64_t st[1] = {p0};
  const copy_pair pair[1] = {{0, 1}};
  const auto pool0 = p.pool;
  REQUIRE(gated_delta_recurrent_step_host(p.args(), o, varlen_batch{cu, st}, recurrent_slots{pair, ring, R}));
  const auto verified = p.pool;
  // Rolling back k of the n verified tokens = the state after n - k tokens, which a step over only the
  // first n - k tokens produces bit for bit.
  for (std::int64_t k = 0; k < n; ++k) {
    CAPTURE(k);
    const std::int64_t keep = n - k;
    p.pool = pool0;
    const std::int32_t cu2[2] = {0, static_cast<std::int32_t>(keep)};
    REQUIRE(gated_delta_recurrent_step_host(p.args(0, keep), o, varlen_batch{cu2, st}, recurrent_slots{pair}));
    const std::int32_t slot = ring[std::size_t(ring_index(p0 + keep, R))];
    CHECK(bitwise_equal(verified.data() + std::size_t(slot) * p.matrix(), p.slot_ptr(1), p.matrix()));
  }
  const std::size_t last = std::size_t(ring[std::size_t(ring_index(p0 + n, R))]);
  CHECK(bitwise_equal(verified.data() + last * p.matrix(), verified.data() + p.matrix(), p.matrix()));
  // A position this call did not reach keeps what an earlier step left there.
  const std::size_t before = std::size_t(ring[std::size_t(ring_index(p0, R))]);
  CHECK(bitwise_equal(verified.data() + before * p.matrix(), pool0.data() + before * p.matrix(), p.matrix()));
}

TEST_CASE("bad shapes, slots and captures return an errc and write nothing") {
  const std::int64_t len = 130;
  gd_problem<float> p(small, len, 4, 2);
  std::fill(p.out.begin(), p.out.end(), 7.0f);
  const auto pool0 = p.pool;
  const auto out0 = p.out;
  gated_delta_options o;
  std::vector<std::int32_t> cu = {0, static_cast<std::int32_t>(len)};
  std::vector<std::int64_t> start = {0};
  std::vector<std::int32_t> init = {0}, fin = {1};
  std::vector<capture_point> caps = {{0, 64, 2}};
  auto prefill = [&](const gated_delta_args<float>& a) {
    return gated_delta_chunked_prefill_host(a, o, varlen_batch{cu, start}, prefill_slots{init, fin, caps}).error();
  };
  const auto a = p.args();

  SUBCASE("shapes and options") {
    auto bad = a;
    bad.v = tensor<const float, 3>(p.v.data(), len, 3, small.v); // HV = 3: not a multiple of H = 2
    CHECK(prefill(bad) == errc::invalid_argument);
    bad = a;
    bad.k = tensor<const float, 3>(p.k.data(), len, small.h, small.k / 2);
    CHECK(prefill(bad) == errc::size_mismatch);
    bad = a;
    bad.state_pool = tensor<float, 4>(p.pool.data(), 4, small.hv, small.k, small.v / 2);
    CHECK(prefill(bad) == errc::size_mismatch);
    bad = a;
    bad.g = tensor<const float, 2>(p.g.data(), len - 1, small.hv);
    CHECK(prefill(bad) == errc::size_mismatch);
    o.chunk = 128;
    CHECK(prefill(a) == errc::unsupported_config);
    o.chunk = 64;
    o.l2norm_eps = 0.0f;
    CHECK(prefill(a) == errc::invalid_argument);
  }
  SUBCASE("the shape and kernel config an argument set describes") {
    const gated_delta_shape sh = shape_of(a, o);
    CHECK(sh.key_heads == 2);
    CHECK(sh.value_heads == 4);
    CHECK(sh.key_dim == 32);
    CHECK(sh.value_dim == 16);
    CHECK(sh.chunk == 64);
    CHECK(sh.state_type == dtype::f32);
    CHECK(sh.validate() == errc{});
    CHECK(sh.matrix_state_bytes() == p.matrix() * sizeof(float));
    CHECK(config_of(a, o, true) == gated_delta_kernel_config{32, 16, 64, dtype::f32});
    CHECK(config_of(a, o, false) == gated_delta_kernel_config{32, 16, 0, dtype::f32});
  }
  SUBCASE("token counts") {
    cu[1] = static_cast<std::int32_t>(len - 1);
    CHECK(prefill(a) == errc::size_mismatch);
  }
  SUBCASE("slots") {
    init[0] = 4;
    CHECK(prefill(a) == errc::out_of_range);
    init[0] = 0;
    fin[0] = 9;
    CHECK(prefill(a) == errc::out_of_range);
    fin[0] = 2; // the capture slot is also the final slot
    CHECK(prefill(a) == errc::overlapping_pairs);
  }
  SUBCASE("captures") {
    caps = {{0, 60, 2}};
    CHECK(prefill(a) == errc::misaligned);
    caps = {{0, 192, 2}}; // beyond the end of the sequence
    CHECK(prefill(a) == errc::out_of_range);
    caps = {{0, 0, 2}}; // the start itself is not a capture
    CHECK(prefill(a) == errc::out_of_range);
    caps = {{1, 64, 2}};
    CHECK(prefill(a) == errc::out_of_range);
    caps = {{0, 64, 4}};
    CHECK(prefill(a) == errc::out_of_range);
    caps = {{0, 64, 0}}; // the initial slot, read while captures are written
    CHECK(prefill(a) == errc::overlapping_pairs);
  }
  SUBCASE("recurrent step") {
    const auto a1 = p.args(0, 2);
    const std::int32_t cu2[3] = {0, 1, 2};
    const std::int64_t st2[2] = {0, 0};
    auto step = [&](std::vector<copy_pair> pairs, std::vector<std::int32_t> ring = {}, std::int32_t rs = 0) {
      return gated_delta_recurrent_step_host(a1, o, varlen_batch{cu2, st2}, recurrent_slots{pairs, ring, rs}).error();
    };
    CHECK(step({{0, 4}, {1, 1}}) == errc::out_of_range);
    CHECK(step({{0, 1}}) == errc::size_mismatch);
    CHECK(step({{0, 2}, {1, 2}}) == errc::overlapping_pairs);   // one destination twice
    CHECK(step({{0, 1}, {1, 2}}) == errc::overlapping_pairs);   // a destination another row reads
    CHECK(step({{0, 0}, {1, 1}}, {2, 4, 3, -1}, 2) == errc::out_of_range);
    CHECK(step({{0, 0}, {1, 1}}, {2, 3}, 2) == errc::size_mismatch);
    CHECK(step({{0, 0}, {1, 1}}, {2, 1, 3, -1}, 2) == errc::overlapping_pairs); // ring overlaps a live slot
    CHECK(step({{0, 0}, {1, 1}}, {}, -1) == errc::invalid_argument);
  }
  CHECK(p.pool == pool0);
  CHECK(p.out == out0);
}
