// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Prints what a prefix cache must hold for public hybrid models: bytes per KV block, bytes per recurrent
// snapshot, the snapshot alignment unit, and how many snapshots fit a given budget.
#include <reprise/state/model_config.hpp>
#include <reprise/state/presets.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

void print_row(const char* name, const reprise::model_config& c, double budget_gib) {
  const double snap_mib = static_cast<double>(c.bytes_per_snapshot()) / kMiB;
  const double budget = budget_gib * 1024.0 * kMiB;
  const long fits = c.bytes_per_snapshot() ? static_cast<long>(budget / static_cast<double>(c.bytes_per_snapshot())) : 0;
  std::printf("%-20s %5u %5u %10.1f %11.1f %9u %12ld\n", name, c.attention_layers(), c.recurrent_layers(),
              static_cast<double>(c.bytes_per_kv_block()) / 1024.0, snap_mib, c.alignment(), fits);
}

} // namespace

int main(int argc, char** argv) {
  double budget_gib = 8.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::puts("usage: reprise-state-sizes [--snapshot-budget-gib G]\n"
                "Prints per-model cache sizes: KV bytes per block, bytes per recurrent snapshot, the alignment\n"
                "unit lcm(B, every Q) at which snapshots may sit, and how many snapshots fit the budget.");
      return 0;
    }
    if (std::strcmp(argv[i], "--snapshot-budget-gib") == 0 && i + 1 < argc) {
      budget_gib = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown option: %s (try --help)\n", argv[i]);
      return 2;
    }
  }
  using namespace reprise;
  std::printf("%-20s %5s %5s %10s %11s %9s %12s\n", "model", "attn", "rec", "KiB/block", "MiB/snapshot",
              "align", "snaps/budget");
  print_row("Nemotron-H-8B", model_config::of<presets::nemotron_h_8b>(), budget_gib);
  print_row("Qwen3-Next-80B-A3B", model_config::of<presets::qwen3_next_80b>(), budget_gib);
  print_row("Falcon-H1-7B", model_config::of<presets::falcon_h1_7b>(), budget_gib);
  print_row("Llama-3-8B (attn)", model_config::of<presets::llama3_8b>(), budget_gib);
  std::printf("snapshot budget: %.1f GiB\n", budget_gib);

  // A runtime config as an engine would build it from a checkpoint: the same rules as the templates.
  auto bad = model_config::make({{kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 528}, 4},
                                 {mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8}, 24}});
  std::printf("block size 528 with chunk 256: %s (alignment would be lcm = 8448 tokens)\n",
              bad ? "accepted" : std::string(to_string(bad.error())).c_str());
  return 0;
}
