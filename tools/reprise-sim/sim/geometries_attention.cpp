// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Cache instantiations for one family of geometry models (see sim/cache_adapter.hpp).
#include "sim/cache_adapter.hpp"

namespace reprise::sim::adapter {

std::span<const geometry> attention_geometries() {
  static constexpr geometry table[] = {make_geometry<16, 0>(), make_geometry<32, 0>(), make_geometry<64, 0>(),
                                       make_geometry<128, 0>(), make_geometry<256, 0>()};
  return table;
}

} // namespace reprise::sim::adapter
