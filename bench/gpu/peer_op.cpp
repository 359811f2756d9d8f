// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-peer-op: runs one Reprise chunked prefill on operands read from a folder, for the peer comparison
// (bench/gpu/peer_compare.py). The same source builds two programs:
//   reprise-peer-op-host   the host implementations (include/reprise/ops/); validates the harness anywhere
//   reprise-peer-op        the device launchers (reprise::kernels), timed with CUDA events
//
// Folder protocol (all files little-endian, row-major, no header):
//   spec.txt        `key value...` lines:
//                     op          mamba2_ssd | gated_delta
//                     dtype       f32 | bf16          (element type of the activation inputs)
//                     cu_seqlens  0 l0 l0+l1 ...      (S + 1 offsets; every sequence starts at position 0)
//                     chunk       Q
//                     captures    0 | 1               (1: capture the state at every chunk end of every sequence)
//                     reps        N                   (device: timed repetitions after 3 warm-ups)
//                   mamba2_ssd:  heads H, head_dim P, groups G, state_dim N (dt softplus, no upper limit, no z)
//                   gated_delta: key_heads H, value_heads HV, key_dim K, value_dim V, scale s (0: 1/sqrt(K)),
//                                l2norm 0 | 1
//   inputs          mamba2_ssd:  x [T,H,P], dt [T,H], B [T,G,N], C [T,G,N] in `dtype`; A, D, dt_bias [H] f32
//                   gated_delta: q, k [T,H,K], v [T,HV,V] in `dtype`; g, beta [T,HV] f32
//                   initial.f32 [S, heads, d1, d2] when present: each sequence's initial state
//   outputs         y.f32 (mamba2 [T,H,P]) or out.f32 (gated delta [T,HV,V]), final.f32 [S, ...],
//                   captures.f32 [C, ...] with captures.txt (`sequence position` per line, same order),
//                   timing.txt (device: median_ms, min_ms, max_ms, reps), status.txt (`ok` or the error)
#include <reprise/errc.hpp>
#include <reprise/ops/gated_delta.hpp>
#include <reprise/ops/mamba2.hpp>

#if REPRISE_PEER_DEVICE
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace reprise;
using namespace reprise::ops;

struct spec {
  std::map<std::string, std::vector<std::string>> kv;
  std::int64_t num(const std::string& k, std::int64_t fallback = -1) const {
    auto it = kv.find(k);
    if (it == kv.end() || it->second.empty()) {
      if (fallback >= 0) return fallback;
      throw std::runtime_error("spec: missing " + k);
    }
    return std::stoll(it->second[0]);
  }
  double real(const std::string& k, double fallback) const {
    auto it = kv.find(k);
    return it == kv.end() || it->second.empty() ? fallback : std::stod(it->second[0]);
  }
  std::string str(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end() || it->second.empty()) throw std::runtime_error("spec: missing " + k);
    return it->second[0];
  }
};

spec read_spec(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  spec s;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, v;
    if (!(ls >> key) || key[0] == '#') continue;
    while (ls >> v) s.kv[key].push_back(v);
  }
  return s;
}

template <class T>
std::vector<T> read_file(const fs::path& p, std::size_t count) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::vector<T> v(count);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(T)));
  if (static_cast<std::size_t>(in.gcount()) != count * sizeof(T) || in.peek() != std::char_traits<char>::eof())
    throw std::runtime_error(p.string() + ": expected " + std::to_string(count * sizeof(T)) + " bytes");
  return v;
}

void write_floats(const fs::path& p, const std::vector<float>& v) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  std::transform(v.begin(), v.end(), f.begin(), [](T e) { return to_float(e); });
  return f;
}

/// The sequences, slot layout and capture list shared by both operations. Slots [0, S) hold the initial
/// states, [S, 2S) the final states, [2S, 2S + C) the captures.
struct batch_plan {
  std::vector<std::int32_t> cu;
  std::vector<std::int64_t> starts;
  std::vector<std::int32_t> initial, final;
  std::vector<capture_point> captures;
  std::int64_t sequences = 0, tokens = 0, slots = 0;

  batch_plan(const spec& s, std::int64_t chunk, bool has_initial) {
    for (const std::string& v : s.kv.at("cu_seqlens")) cu.push_back(static_cast<std::int32_t>(std::stol(v)));
    sequences = static_cast<std::int64_t>(cu.size()) - 1;
    tokens = cu.back();
    starts.assign(static_cast<std::size_t>(sequences), 0);
    for (std::int64_t q = 0; q < sequences; ++q) {
      initial.push_back(has_initial ? static_cast<std::int32_t>(q) : -1);
      final.push_back(static_cast<std::int32_t>(sequences + q));
    }
    std::int32_t next = static_cast<std::int32_t>(2 * sequences);
    if (s.num("captures", 0) != 0)
      for (std::int64_t q = 0; q < sequences; ++q) {
        const std::int64_t len = cu[static_cast<std::size_t>(q + 1)] - cu[static_cast<std::size_t>(q)];
        for (std::int64_t p = chunk; p < len; p += chunk) captures.push_back({static_cast<std::int32_t>(q), p, next++});
      }
    slots = next;
  }
  varlen_batch batch() const { return {cu, starts}; }
  prefill_slots prefill() const { return {initial, final, captures}; }
};

struct timing {
  std::vector<float> ms;
};

#if REPRISE_PEER_DEVICE
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) { check(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)), "cudaMalloc"); }
  dbuf(const std::vector<T>& h) : dbuf(h.size()) {
    check(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  ~dbuf() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

/// Runs `launch` 3 times, then `reps` times between CUDA events; the last run's results stay.
template <class Launch>
timing run_timed(Launch&& launch, std::int64_t reps) {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  timing t;
  for (int i = 0; i < 3; ++i) launch(stream);
  check(cudaStreamSynchronize(stream), "warm-up");
  for (std::int64_t i = 0; i < reps; ++i) {
    check(cudaEventRecord(a, stream), "cudaEventRecord");
    launch(stream);
    check(cudaEventRecord(b, stream), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.ms.push_back(ms);
  }
  check(cudaGetLastError(), "launch");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(stream);
  return t;
}
#endif

void must(const result<void>& r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + std::string(to_string(r.error())));
}

/// Writes the final and captured states out of the pool ([slots, heads, d1, d2] fp32).
void write_states(const fs::path& dir, const batch_plan& plan, const std::vector<float>& pool, std::int64_t per_slot) {
  auto slot = [&](std::int64_t s) {
    return std::vector<float>(pool.begin() + s * per_slot, pool.begin() + (s + 1) * per_slot);
  };
  std::vector<float> fin, caps;
  for (std::int32_t s : plan.final) {
    auto v = slot(s);
    fin.insert(fin.end(), v.begin(), v.end());
  }
  std::ofstream list(dir / "captures.txt");
  for (const capture_point& c : plan.captures) {
    auto v = slot(c.slot);
    caps.insert(caps.end(), v.begin(), v.end());
    list << c.sequence << ' ' << c.position << '\n';
  }
  write_floats(dir / "final.f32", fin);
  write_floats(dir / "captures.f32", caps);
}

void write_timing(const fs::path& dir, timing t) {
  std::ofstream out(dir / "timing.txt");
  if (t.ms.empty()) {
    out << "host 1\n";
    return;
  }
  std::sort(t.ms.begin(), t.ms.end());
  out << "median_ms " << t.ms[t.ms.size() / 2] << "\nmin_ms " << t.ms.front() << "\nmax_ms " << t.ms.back()
      << "\nreps " << t.ms.size() << '\n';
}

std::vector<float> initial_pool(const fs::path& dir, const batch_plan& plan, std::int64_t per_slot, bool has_initial) {
  std::vector<float> pool(static_cast<std::size_t>(plan.slots * per_slot), 0.0f);
  if (has_initial) {
    auto init = read_file<float>(dir / "initial.f32", static_cast<std::size_t>(plan.sequences * per_slot));
    std::copy(init.begin(), init.end(), pool.begin());
  }
  return pool;
}

template <class T>
void run_mamba2(const fs::path& dir, const spec& sp, bool device) {
  const std::int64_t H = sp.num("heads"), P = sp.num("head_dim"), G = sp.num("groups"), N = sp.num("state_dim");
  const std::int64_t Q = sp.num("chunk");
  const bool has_initial = fs::exists(dir / "initial.f32");
  const batch_plan plan(sp, Q, has_initial);
  const std::int64_t n = plan.tokens, per_slot = H * P * N;
  auto sz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const auto x = read_file<T>(dir / "x", sz(n * H * P));
  const auto dt = read_file<T>(dir / "dt", sz(n * H));
  const auto B = read_file<T>(dir / "B", sz(n * G * N));
  const auto C = read_file<T>(dir / "C", sz(n * G * N));
  const auto A = read_file<float>(dir / "A", sz(H));
  const auto D = read_file<float>(dir / "D", sz(H));
  const auto bias = read_file<float>(dir / "dt_bias", sz(H));
  std::vector<float> pool = initial_pool(dir, plan, per_slot, has_initial);
  std::vector<T> y(sz(n * H * P));
  timing t;
  auto args_over = [&](const T* px, const T* pdt, const T* pB, const T* pC, const float* pA, const float* pD,
                       const float* pbias, float* ppool, T* py) {
    mamba2_args<T> a;
    a.x = make_tensor(px, n, H, P);
    a.dt = make_tensor(pdt, n, H);
    a.A = make_tensor(pA, H);
    a.B = make_tensor(pB, n, G, N);
    a.C = make_tensor(pC, n, G, N);
    a.D = make_tensor(pD, H);
    a.dt_bias = make_tensor(pbias, H);
    a.state_pool = make_tensor(ppool, plan.slots, H, P, N);
    a.y = make_tensor(py, n, H, P);
    a.chunk = Q;
    return a;
  };
  if (!device) {
    must(mamba2_ssd_prefill_host(args_over(x.data(), dt.data(), B.data(), C.data(), A.data(), D.data(), bias.data(),
                                           pool.data(), y.data()),
                                 plan.batch(), plan.prefill()),
         "mamba2_ssd_prefill_host");
  } else {
#if REPRISE_PEER_DEVICE
    dbuf<T> dx(x), ddt(dt), dB(B), dC(C), dy(y.size());
    dbuf<float> dA(A), dD(D), dbias(bias), dpool(pool);
    const auto a = args_over(dx.p, ddt.p, dB.p, dC.p, dA.p, dD.p, dbias.p, dpool.p, dy.p);
    const std::size_t bytes = mamba2_ssd_prefill_workspace_bytes(a, plan.batch(), plan.prefill());
    if (bytes == 0) throw std::runtime_error("mamba2_ssd_prefill_workspace_bytes: 0 (no instance or bad operands)");
    dbuf<unsigned char> ws(bytes);
    t = run_timed([&](cudaStream_t s) { must(mamba2_ssd_prefill(a, plan.batch(), plan.prefill(), {ws.p, bytes}, s),
                                             "mamba2_ssd_prefill"); },
                  sp.num("reps", 20));
    y = dy.host();
    pool = dpool.host();
#endif
  }
  write_floats(dir / "y.f32", widen(y));
  write_states(dir, plan, pool, per_slot);
  write_timing(dir, t);
}

template <class T>
void run_gated_delta(const fs::path& dir, const spec& sp, bool device) {
  const std::int64_t H = sp.num("key_heads"), HV = sp.num("value_heads"), K = sp.num("key_dim"), V = sp.num("value_dim");
  gated_delta_options o;
  o.chunk = static_cast<std::uint32_t>(sp.num("chunk"));
  o.scale = static_cast<float>(sp.real("scale", 0.0));
  o.l2norm_qk = sp.num("l2norm", 0) != 0;
  const bool has_initial = fs::exists(dir / "initial.f32");
  const batch_plan plan(sp, o.chunk, has_initial);
  const std::int64_t n = plan.tokens, per_slot = HV * K * V;
  auto sz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const auto q = read_file<T>(dir / "q", sz(n * H * K));
  const auto k = read_file<T>(dir / "k", sz(n * H * K));
  const auto v = read_file<T>(dir / "v", sz(n * HV * V));
  const auto g = read_file<float>(dir / "g", sz(n * HV));
  const auto beta = read_file<float>(dir / "beta", sz(n * HV));
  std::vector<float> pool = initial_pool(dir, plan, per_slot, has_initial);
  std::vector<T> out(sz(n * HV * V));
  timing t;
  auto args_over = [&](const T* pq, const T* pk, const T* pv, const float* pg, const float* pb, float* ppool, T* po) {
    gated_delta_args<T> a;
    a.q = make_tensor(pq, n, H, K);
    a.k = make_tensor(pk, n, H, K);
    a.v = make_tensor(pv, n, HV, V);
    a.g = make_tensor(pg, n, HV);
    a.beta = make_tensor(pb, n, HV);
    a.state_pool = make_tensor(ppool, plan.slots, HV, K, V);
    a.out = make_tensor(po, n, HV, V);
    return a;
  };
  if (!device) {
    must(gated_delta_chunked_prefill_host(args_over(q.data(), k.data(), v.data(), g.data(), beta.data(), pool.data(),
                                                    out.data()),
                                          o, plan.batch(), plan.prefill()),
         "gated_delta_chunked_prefill_host");
  } else {
#if REPRISE_PEER_DEVICE
    dbuf<T> dq(q), dk(k), dv(v), dout(out.size());
    dbuf<float> dg(g), db(beta), dpool(pool);
    const auto a = args_over(dq.p, dk.p, dv.p, dg.p, db.p, dpool.p, dout.p);
    const std::size_t bytes = gated_delta_chunked_prefill_workspace_bytes(a, o, plan.batch(), plan.prefill());
    if (bytes == 0) throw std::runtime_error("gated_delta_chunked_prefill_workspace_bytes: 0 (no instance or bad operands)");
    dbuf<unsigned char> ws(bytes);
    t = run_timed([&](cudaStream_t s) {
      must(gated_delta_chunked_prefill(a, o, plan.batch(), plan.prefill(), {ws.p, bytes}, s), "gated_delta_chunked_prefill");
    }, sp.num("reps", 20));
    out = dout.host();
    pool = dpool.host();
#endif
  }
  write_floats(dir / "out.f32", widen(out));
  write_states(dir, plan, pool, per_slot);
  write_timing(dir, t);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: %s OPERAND_DIR  (see bench/gpu/peer_op.cpp for the folder protocol)\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const bool device = REPRISE_PEER_DEVICE != 0;
  try {
    const spec sp = read_spec(dir / "spec.txt");
    const std::string op = sp.str("op"), dtype = sp.str("dtype");
    if (dtype != "f32" && dtype != "bf16") throw std::runtime_error("spec: dtype must be f32 or bf16");
    const bool bf = dtype == "bf16";
    if (op == "mamba2_ssd")
      bf ? run_mamba2<bfloat16>(dir, sp, device) : run_mamba2<float>(dir, sp, device);
    else if (op == "gated_delta")
      bf ? run_gated_delta<bfloat16>(dir, sp, device) : run_gated_delta<float>(dir, sp, device);
    else
      throw std::runtime_error("spec: unknown op " + op);
    std::ofstream(dir / "status.txt") << "ok\n";
  } catch (const std::exception& e) {
    std::ofstream(dir / "status.txt") << e.what() << '\n';
    std::fprintf(stderr, "reprise-peer-op: %s\n", e.what());
    return 1;
  }
  return 0;
}
