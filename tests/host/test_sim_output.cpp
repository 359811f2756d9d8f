// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim outputs: CSV quoting and shape, SVG charts (ticks, legend, notes), model presets and files.
#include "sim/csv.hpp"
#include "sim/models.hpp"
#include "sim/progress.hpp"
#include "sim/svg_plot.hpp"

#include <reprise/state/presets.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

using namespace reprise;
using namespace reprise::sim;

TEST_CASE("csv: header, quoting, one cell per column") {
  std::ostringstream out;
  csv_writer w(out, {"policy", "hit_rate", "requests"});
  w.cell("snapshot_restore<every 1024, \"last\">").cell(0.25).cell(std::uint64_t{12});
  w.end_row();
  w.cell("a,b").cell(1.0 / 3).cell(std::uint64_t{0});
  w.end_row();
  CHECK(out.str() == "policy,hit_rate,requests\n"
                     "\"snapshot_restore<every 1024, \"\"last\"\">\",0.25,12\n"
                     "\"a,b\",0.3333333333333333,0\n");
}

TEST_CASE("svg: axes, ticks, legend and notes") {
  line_chart c{.title = "Hit rate vs snapshot budget",
               .x_label = "snapshot budget",
               .y_label = "request hit rate",
               .x_format = axis_format::bytes,
               .y_format = axis_format::percent,
               .x_log = true,
               .y_min = 0,
               .y_max = 100};
  c.lines.push_back({"memory_only", {0x1p28, 0x1p30, 0x1p32}, {0, 0, 0}});
  c.lines.push_back({"snapshot <every 1024>", {0x1p28, 0x1p30, 0x1p32}, {10, NAN, 80}});
  c.notes.push_back("256 MiB: budget below one snapshot (97.4 MiB x 3 < needed) & never hits");
  const std::string svg = render_svg(c);
  CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.ends_with("</svg>\n"));
  CHECK(svg.find("Hit rate vs snapshot budget") != std::string::npos);
  CHECK(svg.find(">256 MiB<") != std::string::npos);
  CHECK(svg.find(">4 GiB<") != std::string::npos);
  CHECK(svg.find(">100%<") != std::string::npos);
  CHECK(svg.find("snapshot &lt;every 1024&gt;") != std::string::npos);
  CHECK(svg.find("&amp; never hits") != std::string::npos);
  CHECK(svg.find("#0072B2") != std::string::npos);
  CHECK(svg.find("#D55E00") != std::string::npos);
  // The NaN point breaks the second line into two moves.
  const std::size_t second = svg.find("stroke=\"#D55E00\" stroke-width");
  REQUIRE(second != std::string::npos);
  const std::size_t d = svg.rfind("<path d=\"", second);
  const std::string path = svg.substr(d, second - d);
  CHECK(std::count(path.begin(), path.end(), 'M') == 2);
}

TEST_CASE("ticks are round numbers and powers of two") {
  CHECK(nice_ticks(0, 100) == std::vector<double>{0, 20, 40, 60, 80, 100});
  CHECK(nice_ticks(0, 0.9, 5) == std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8});
  CHECK(pow2_ticks(256, 4096) == std::vector<double>{256, 512, 1024, 2048, 4096});
  CHECK(pow2_ticks(1, 0x1p20).size() <= 8);
  CHECK(format_tick(0x1p30 * 40, axis_format::bytes) == "40 GiB");
  CHECK(format_tick(2.5e6, axis_format::number) == "2.5M");
}

TEST_CASE("presets carry the library's figures and a parameter count") {
  REQUIRE(preset_models().size() == 4);
  const sim_model* n = find_preset("nemotron-h-8b");
  REQUIRE(n != nullptr);
  CHECK(n->config.bytes_per_snapshot() == presets::nemotron_h_8b::bytes_per_snapshot);
  CHECK(n->config.alignment() == 128); // the checkpoint's chunk_size
  CHECK(n->active_params == doctest::Approx(8.1e9));
  CHECK(find_preset("llama-3-8b")->config.has_recurrent() == false);
  CHECK(find_preset("qwen3-next-80b-a3b")->config.alignment() == 64);
  CHECK(find_preset("gpt-5") == nullptr);
}

TEST_CASE("model files: a valid file, and every error names its line") {
  const auto ok = parse_model_file(R"(# a Jamba-like hybrid
name = my-hybrid
active_params = 12e9
attention = count=4 kv_heads=8 head_dim=128 block_size=64
mamba2 = count=28 heads=64 head_dim=64 state_dim=128 groups=1 conv_width=4 chunk=256
)");
  REQUIRE(std::holds_alternative<sim_model>(ok));
  const sim_model& m = std::get<sim_model>(ok);
  CHECK(m.name == "my-hybrid");
  CHECK(m.config.block_size() == 64);
  CHECK(m.config.alignment() == 256);
  CHECK(m.config.recurrent_layers() == 28);

  auto error_of = [](std::string_view text) {
    const auto r = parse_model_file(text);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string();
  };
  CHECK(error_of("name = x\nactive_params = 1e9\nmamba2 = count=1 heads=4 colour=3").find("line 3") != std::string::npos);
  CHECK(error_of("active_params = -1").find("line 1") != std::string::npos);
  CHECK(error_of("whatever").find("line 1") != std::string::npos);
  CHECK(error_of("attention = count=1 kv_heads=8 head_dim=128").find("active_params") != std::string::npos);
  CHECK(error_of("active_params = 1e9\nmamba2 = count=1 heads=4 head_dim=8 state_dim=8 chunk=100").find("unsupported_config") !=
        std::string::npos);
}

TEST_CASE("block-size variants keep the chunk grid rule") {
  const model_config& n = find_preset("nemotron-h-8b")->config;
  auto b64 = with_block_size(n, 64);
  REQUIRE(b64.has_value());
  CHECK(b64->block_size() == 64);
  CHECK(b64->alignment() == 128); // max(B, Q): Q = 128
  CHECK(b64->bytes_per_kv_block() == 4 * n.bytes_per_kv_block());
  CHECK(with_block_size(n, 256)->alignment() == 256);
  CHECK(with_block_size(n, 528).error() == errc::misaligned);
}

TEST_CASE("byte sizes parse and print") {
  CHECK(parse_bytes("40GiB") == std::uint64_t{40} << 30);
  CHECK(parse_bytes("512 MiB") == std::uint64_t{512} << 20);
  CHECK(parse_bytes("1.5G") == std::uint64_t{3} << 29);
  CHECK(parse_bytes("1048576") == std::uint64_t{1} << 20);
  CHECK_FALSE(parse_bytes("lots").has_value());
  CHECK_FALSE(parse_bytes("-1G").has_value());
  CHECK_FALSE(parse_bytes("3 parsecs").has_value());
  CHECK(format_bytes(97.4 * 1024 * 1024) == "97.4 MiB");
}

TEST_CASE("the progress bar draws only when enabled") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress quiet("replay", 100, false, f);
    for (std::uint64_t i = 0; i <= 100; ++i) quiet.update(i);
  }
  CHECK(std::ftell(f) == 0);
  {
    progress shown("replay", 100, true, f);
    for (std::uint64_t i = 0; i <= 100; ++i) shown.update(i);
  }
  CHECK(std::ftell(f) > 0);
  std::fclose(f);
}
