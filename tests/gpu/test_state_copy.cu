// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Device slot / block copy, transfer between device and pinned host pools and KV gather vs the host
// implementations (byte-exact).
#include <reprise/ops/state_copy.hpp>

#include "gpu/harness.cuh"
#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {
std::vector<unsigned char> random_bytes(random_source& rng, std::size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng.integer(0, 255));
  return v;
}
} // namespace

TEST_CASE("device unit copy equals the host copy for 16-byte, 4-byte and byte pools") {
  random_source rng(31);
  // A 200 KiB unit spans several blocks; 44 and 42 byte units take the narrow paths.
  const std::vector<std::size_t> units{200 * 1024, 44, 42};
  const std::int64_t n = 7;
  std::vector<std::vector<unsigned char>> host;
  std::vector<thrust::device_vector<unsigned char>> dev;
  for (std::size_t u : units) {
    host.push_back(random_bytes(rng, u * n));
    dev.push_back(to_device(host.back()));
  }
  std::vector<pool_view> hpools, dpools;
  for (std::size_t i = 0; i < units.size(); ++i) {
    hpools.push_back({host[i].data(), units[i], n});
    dpools.push_back({thrust::raw_pointer_cast(dev[i].data()), units[i], n});
  }
  const std::vector<copy_pair> pairs{{0, 4}, {1, 5}, {0, 6}, {2, 3}};
  scratch ws(copy_units_workspace_bytes(dpools.size(), pairs.size()));
  REQUIRE(copy_units(dpools, pairs, ws.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  REQUIRE(copy_units_host(hpools, pairs).has_value());
  for (std::size_t i = 0; i < units.size(); ++i) CHECK(to_host(dev[i]) == host[i]);
  // Rejected lists launch nothing.
  const std::vector<copy_pair> bad{{0, 4}, {4, 5}};
  CHECK(copy_units(dpools, bad, ws.workspace(), nullptr).error() == errc::overlapping_pairs);
  CHECK(copy_units(dpools, pairs, {}, nullptr).error() == errc::size_mismatch);
}

namespace {
/// Pinned, mapped host memory (cudaHostAlloc): the device reads and writes it at its host address.
struct pinned_bytes {
  unsigned char* data = nullptr;
  std::size_t size = 0;
  explicit pinned_bytes(const std::vector<unsigned char>& init) : size(init.size()) {
    REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&data), size, cudaHostAllocDefault) == cudaSuccess);
    std::memcpy(data, init.data(), size);
  }
  pinned_bytes(const pinned_bytes&) = delete;
  pinned_bytes& operator=(const pinned_bytes&) = delete;
  ~pinned_bytes() { cudaFreeHost(data); }
  std::vector<unsigned char> bytes() const { return std::vector<unsigned char>(data, data + size); }
};
} // namespace

TEST_CASE("device transfer between device pools and pinned host pools equals the host transfer") {
  random_source rng(33);
  // 200 KiB units span several blocks; 44 and 42 byte units take the 4-byte and byte paths; the fourth layer's
  // host pool starts 4 bytes into its allocation, so its 16-byte units take the 4-byte path too.
  const std::vector<std::size_t> units{200 * 1024, 44, 42, 64};
  const std::vector<std::size_t> host_offset{0, 0, 0, 4};
  const std::int64_t gpu_units = 9, host_units = 5;
  std::vector<std::vector<unsigned char>> ref_gpu, ref_host;
  std::vector<thrust::device_vector<unsigned char>> dev;
  std::vector<std::unique_ptr<pinned_bytes>> pinned;
  for (std::size_t l = 0; l < units.size(); ++l) {
    ref_gpu.push_back(random_bytes(rng, units[l] * gpu_units));
    ref_host.push_back(random_bytes(rng, units[l] * host_units + host_offset[l]));
    dev.push_back(to_device(ref_gpu.back()));
    pinned.push_back(std::make_unique<pinned_bytes>(ref_host.back()));
  }
  // Views of the same geometry over the reference vectors (host transfer) and the device / pinned memory.
  std::vector<pool_pair_view> ref_out, dev_out, ref_in, dev_in;
  for (std::size_t l = 0; l < units.size(); ++l) {
    const pool_view rg{ref_gpu[l].data(), units[l], gpu_units}, rh{ref_host[l].data() + host_offset[l], units[l], host_units};
    const pool_view dg{thrust::raw_pointer_cast(dev[l].data()), units[l], gpu_units},
        dh{pinned[l]->data + host_offset[l], units[l], host_units};
    ref_out.push_back({rg, rh});
    dev_out.push_back({dg, dh});
    ref_in.push_back({rh, rg});
    dev_in.push_back({dh, dg});
  }
  REQUIRE(check_transfer_pools(dev_out).has_value());
  auto compare = [&] {
    for (std::size_t l = 0; l < units.size(); ++l) {
      CHECK(to_host(dev[l]) == ref_gpu[l]);
      CHECK(pinned[l]->bytes() == ref_host[l]);
    }
  };
  const std::vector<copy_pair> out{{8, 0}, {3, 4}, {0, 2}, {5, 1}};
  const std::vector<copy_pair> in{{0, 6}, {4, 4}, {2, 0}};
  scratch ws(transfer_units_workspace_bytes(units.size(), out.size()));

  SUBCASE("offload, then onboard") {
    REQUIRE(transfer_units(dev_out, out, ws.workspace(), nullptr).has_value());
    REQUIRE(device_ok());
    REQUIRE(transfer_units_host(ref_out, out).has_value());
    compare();
    REQUIRE(transfer_units(dev_in, in, ws.workspace(), nullptr).has_value());
    REQUIRE(device_ok());
    REQUIRE(transfer_units_host(ref_in, in).has_value());
    compare();
  }
  SUBCASE("rejected calls launch nothing") {
    CHECK(transfer_units(dev_out, std::vector<copy_pair>{{0, 5}}, ws.workspace(), nullptr).error() ==
          errc::out_of_range);
    CHECK(transfer_units(dev_out, std::vector<copy_pair>{{0, 1}, {2, 1}}, ws.workspace(), nullptr).error() ==
          errc::overlapping_pairs);
    CHECK(transfer_units(dev_out, out, {}, nullptr).error() == errc::size_mismatch);
    REQUIRE(device_ok());
    compare();
  }
  SUBCASE("pageable host memory is refused by the setup check") {
    auto layers = dev_out;
    layers[1].dst.base = ref_host[1].data();
    CHECK(check_transfer_pools(layers).error() == errc::invalid_argument);
    REQUIRE(device_ok());
  }
}

TEST_CASE("device kv gather equals the host gather") {
  random_source rng(32);
  const kv_pool_layout l{.blocks = 9, .block_size = 16, .kv_heads = 4, .head_dim = 64, .element_bytes = 2};
  const auto pool = random_bytes(rng, static_cast<std::size_t>(l.blocks * l.block_size * l.kv_heads) * l.row_bytes());
  const std::vector<std::int32_t> table{8, 1, 3, 0, 2, 7}, lens{40, 17};
  const std::int64_t out_tokens = 48;
  const std::size_t out_bytes = static_cast<std::size_t>(2 * l.kv_heads * out_tokens) * l.row_bytes();
  std::vector<unsigned char> out(out_bytes, 0x5A);
  auto dpool = to_device(pool);
  thrust::device_vector<unsigned char> dout(out_bytes, 0x5A);
  kv_gather_args h{pool.data(), l, cview(table, 2, 3), lens, out.data(), out_tokens};
  kv_gather_args d = h;
  d.pool = thrust::raw_pointer_cast(dpool.data());
  d.out = thrust::raw_pointer_cast(dout.data());
  scratch ws(gather_kv_workspace_bytes(2, 3));
  REQUIRE(gather_kv(d, ws.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  REQUIRE(gather_kv_host(h).has_value());
  CHECK(to_host(dout) == out);
}
