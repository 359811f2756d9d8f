// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The tables front ends read: the metric list (metrics.hpp).
#include <reprise/reprise.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <set>
#include <string_view>
#include <type_traits>

using namespace reprise;

TEST_CASE("metrics: one list gives the struct, the names and the kinds") {
  static_assert(metric_count == 46);
  static_assert(metric_table.size() == static_cast<std::size_t>(metric::remote_blocks_onboarded) + 1);
  static_assert(metric_info_of(metric::blocks_free).name == "blocks_free");
  std::set<std::string_view> names;
  std::set<std::string_view> gauges;
  for (const metric_info& m : metric_table) {
    CHECK(names.insert(m.name).second);
    CHECK(!m.doc.empty());
    if (m.kind == metric_kind::gauge) gauges.insert(m.name);
  }
  CHECK(gauges == std::set<std::string_view>{"live_sequences", "blocks_referenced", "blocks_cached", "blocks_free",
                                             "tail_blocks", "snapshots_held", "snapshot_bytes_held",
                                             "host_blocks_held", "host_snapshots_held"});
  // The visitor walks the members in declaration order, and `metric_value` reads the member it names.
  cache_metrics v;
  std::size_t visited = 0, last_offset = 0;
  for_each_metric([&](metric id, auto member) {
    CHECK(static_cast<std::size_t>(id) == visited++);
    const auto offset = static_cast<std::size_t>(reinterpret_cast<const char*>(&(v.*member)) -
                                                 reinterpret_cast<const char*>(&v));
    CHECK((visited == 1 || offset > last_offset));
    last_offset = offset;
    v.*member = static_cast<std::remove_reference_t<decltype(v.*member)>>(visited);
  });
  CHECK(visited == metric_count);
  CHECK(metric_value(v, metric::lookups) == 1);
  CHECK(metric_value(v, metric::blocks_free) == v.blocks_free);
  CHECK(metric_value(v, metric::remote_blocks_onboarded) == metric_count);
}
