// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Cache instantiations for one family of geometry models (see sim/cache_adapter.hpp).
#include "sim/cache_adapter.hpp"

namespace reprise::sim::adapter {

std::span<const geometry> hybrid_geometries_a128() {
  static constexpr geometry table[] = {make_geometry<16, 128>(), make_geometry<64, 128>()};
  return table;
}

} // namespace reprise::sim::adapter
