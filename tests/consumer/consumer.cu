// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// An engine's .cu translation unit: nvcc compiles the host library with the flags the exported target gives
// (no -std=c++20 of its own), instantiates the presets and model_config, and drives typed prefix caches.
#include <reprise/reprise.hpp>

#include <cstdio>
#include <vector>

namespace {

template <class Cache>
bool serves_a_repeat(std::uint32_t length, std::uint32_t expected_skip) {
  auto made = Cache::create({.kv_blocks = 128,
                             .max_sequences = 2,
                             .snapshot_budget_bytes = std::size_t{2} * Cache::model_type::bytes_per_snapshot,
                             .hasher_seed = 1});
  if (!made) return false;
  Cache& c = *made;
  std::vector<reprise::token_id> prompt(length);
  for (std::uint32_t i = 0; i < length; ++i) prompt[i] = static_cast<reprise::token_id>(i + 1);
  auto first = c.admit(1, prompt);
  if (!first) return false;
  std::vector<std::uint32_t> written;
  for (const reprise::capture_point& p : first->captures) written.push_back(static_cast<std::uint32_t>(p.position));
  if (!c.commit(1, length, written) || !c.release(1)) return false;
  if (!c.step_complete(c.current_epoch())) return false;
  auto second = c.admit(2, prompt);
  return second && second->usable_tokens == expected_skip && c.check_invariants();
}

} // namespace

int main() {
  using namespace reprise;
  static_assert(presets::nemotron_h_8b::alignment == 128); // the checkpoint's chunk_size
  static_assert(presets::qwen3_next_80b::alignment == 64);
  const model_config config = model_config::of<presets::falcon_h1_7b>();
  const bool ok =
      config.alignment() == 128 &&
      serves_a_repeat<prefix_cache<presets::llama3_8b, policy::block_sharing>>(100, 96) &&
      serves_a_repeat<prefix_cache<presets::nemotron_h_8b, policy::snapshot_restore<>>>(600, 512) &&
      serves_a_repeat<prefix_cache<presets::qwen3_next_80b,
                                   policy::snapshot_restore<policy::capture<policy::every<128>>,
                                                            policy::accept_prefill_exact>>>(300, 256) &&
      serves_a_repeat<prefix_cache<presets::falcon_h1_7b, policy::memory_only>>(300, 0);
  std::printf("consumer_cu: nvcc-compiled caches %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
