// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Device discovery on a machine with a GPU (skipped elsewhere).
#include <reprise/gpu/device.hpp>

#include <doctest/doctest.h>

TEST_CASE("query_device reports the device the kernels target") {
  REQUIRE(reprise::gpu::device_count() > 0);
  auto info = reprise::gpu::query_device(0);
  REQUIRE(info.has_value());
  CHECK(info->sm_count > 0);
  CHECK(info->global_memory_bytes > 0);
  CHECK(info->compute_major >= 7);
  CHECK(reprise::gpu::query_device(reprise::gpu::device_count()).error() == reprise::errc::out_of_range);
}
