// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// read_hf_config: every preset equals what the reader gets from its checkpoint's public config.json
// (tests/data/hf_configs/), transformers' defaults where a field is absent, errors that name the field, and dtypes
// from the config with an override; a path that is not a config.json file (a device, a directory, a FIFO, a file
// over the size bound) refused without reading it.
#include <reprise/state/hf_config.hpp>
#include <reprise/state/presets.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/stat.h>

using namespace reprise;

namespace {

std::string fixture_path(const char* name) { return std::string(REPRISE_HF_CONFIGS_DIR) + "/" + name; }

std::string fixture(const char* name) {
  std::ifstream in(fixture_path(name));
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// `json` with `"key": old` replaced by `"key": value` (or the field removed when `value` is empty).
std::string with(std::string json, const std::string& key, const std::string& value) {
  const std::string needle = "\"" + key + "\": ";
  const auto at = json.find(needle);
  REQUIRE(at != std::string::npos);
  auto end = json.find_first_of(",\n}", at + needle.size());
  if (json[at + needle.size()] == '"') end = json.find('"', at + needle.size() + 1) + 1;
  if (value.empty()) {
    if (json[end] == ',') ++end;
    json.erase(at, end - at);
  } else {
    json.replace(at + needle.size(), end - at - needle.size(), value);
  }
  return json;
}

/// Every figure of the reading equals the preset's, group by group (shapes, dtypes and counts).
template <class Preset>
void check_preset(const char* file) {
  CAPTURE(file);
  const hf_reading r = read_hf_config_file(fixture_path(file));
  INFO(r.message);
  REQUIRE(r);
  const model_config preset = model_config::of<Preset>();
  const model_config& c = *r.config;
  CHECK(c.bytes_per_kv_block() == preset.bytes_per_kv_block());
  CHECK(c.bytes_per_snapshot() == preset.bytes_per_snapshot());
  CHECK(c.alignment() == preset.alignment());
  CHECK(c.block_size() == preset.block_size());
  CHECK(c.attention_layers() == preset.attention_layers());
  CHECK(c.facts().mamba2_layers == preset.facts().mamba2_layers);
  CHECK(c.facts().gated_delta_layers == preset.facts().gated_delta_layers);
  REQUIRE(c.groups().size() == preset.groups().size());
  for (std::size_t i = 0; i < c.groups().size(); ++i) {
    CHECK(c.groups()[i].count == preset.groups()[i].count);
    CHECK(c.groups()[i].shape == preset.groups()[i].shape);
  }
}

/// A fresh directory under the system's temporary directory, removed with everything in it.
struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    std::string name = (std::filesystem::temp_directory_path() / "reprise_hf_config_XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path = name;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

/// The error of reading `path`: `invalid_argument`, naming the path.
void check_refused(const std::filesystem::path& path, const std::string& why) {
  CAPTURE(path);
  const hf_reading r = read_hf_config_file(path);
  INFO(r.message);
  CHECK(!r);
  CHECK(r.error == errc::invalid_argument);
  CHECK(r.message.find(path.string()) != std::string::npos);
  CHECK(r.message.find(why) != std::string::npos);
}

} // namespace

TEST_CASE("every preset equals its checkpoint's config.json") {
  check_preset<presets::nemotron_h_8b>("nemotron_h_8b.json");
  check_preset<presets::qwen3_next_80b>("qwen3_next_80b_a3b.json");
  check_preset<presets::falcon_h1_7b>("falcon_h1_7b.json");
  check_preset<presets::llama3_8b>("llama_3_8b.json");
}

TEST_CASE("Nemotron-H-8B: the checkpoint's chunk of 128 is the alignment; the figures transformers sizes") {
  const hf_reading r = read_hf_config(fixture("nemotron_h_8b.json"));
  REQUIRE(r);
  CHECK(r.config->alignment() == 128);
  CHECK(r.config->bytes_per_kv_block() == 262144);
  CHECK(r.config->bytes_per_snapshot() == 102137856);
  CHECK(presets::nemotron_h_8b::alignment == 128);
}

TEST_CASE("the other fixtures") {
  SUBCASE("Qwen3.5-27B: fields in text_config, explicit layer_types") {
    const hf_reading r = read_hf_config(fixture("qwen3_5_27b.json"));
    REQUIRE(r);
    CHECK(r.config->attention_layers() == 16);
    CHECK(r.config->facts().gated_delta_layers == 48);
    CHECK(r.config->bytes_per_snapshot() == 48u * (3 * (2 * 16 * 128 + 48 * 128) * 2 + 48 * 128 * 128 * 4));
    CHECK(r.config->bytes_per_kv_block() == 16u * 2 * 4 * 256 * 2 * 16);
  }
  SUBCASE("Granite-4.0-H-Small") {
    const hf_reading r = read_hf_config(fixture("granite_4_h_small.json"));
    REQUIRE(r);
    CHECK(r.config->attention_layers() == 4);
    CHECK(r.config->facts().mamba2_layers == 36);
    CHECK(r.config->bytes_per_snapshot() == 36u * (3 * (128 * 64 + 2 * 128) * 2 + 128 * 64 * 128 * 4));
    CHECK(r.config->alignment() == 256);
  }
  SUBCASE("Bamba-9B") {
    const hf_reading r = read_hf_config(fixture("bamba_9b.json"));
    REQUIRE(r);
    CHECK(r.config->attention_layers() == 3);
    CHECK(r.config->facts().mamba2_layers == 29);
  }
  SUBCASE("Mamba2 (Mamba2Config): Mamba2 layers only, no KV") {
    const hf_reading r = read_hf_config(
        R"({"architectures": ["Mamba2ForCausalLM"], "hidden_size": 256, "num_hidden_layers": 4, "num_heads": 8,
            "head_dim": 64, "expand": 2, "state_size": 64, "n_groups": 1, "conv_kernel": 4, "chunk_size": 64,
            "torch_dtype": "float32"})");
    REQUIRE(r);
    CHECK(r.config->attention_layers() == 0);
    CHECK(r.config->facts().mamba2_layers == 4);
    CHECK(r.config->bytes_per_kv_block() == 0);
    CHECK(r.config->bytes_per_snapshot() == 4u * (3 * (8 * 64 + 2 * 64) * 4 + 8 * 64 * 64 * 4));
    CHECK(r.config->alignment() == 64);
  }
  SUBCASE("Mamba2 without its sizes: Mamba2Config's defaults (128 heads of 64 over 2 x 4096, 64 layers)") {
    const hf_reading r = read_hf_config(R"({"architectures": ["Mamba2ForCausalLM"], "torch_dtype": "bfloat16"})");
    REQUIRE(r);
    CHECK(r.config->facts().mamba2_layers == 64);
    CHECK(r.config->bytes_per_snapshot() == 64u * (3 * (128 * 64 + 2 * 8 * 128) * 2 + 128 * 64 * 128 * 4));
    CHECK(r.config->alignment() == 256);
  }
  SUBCASE("Mamba2 whose heads do not tile its inner size is an error naming the fields") {
    const hf_reading r = read_hf_config(R"({"architectures": ["Mamba2ForCausalLM"], "hidden_size": 256,
                                            "num_heads": 8, "head_dim": 48})");
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("num_heads 8 x head_dim 48 != expand x hidden_size 512") != std::string::npos);
  }
  SUBCASE("Jamba is refused, naming Mamba-1") {
    const hf_reading r = read_hf_config(fixture("jamba_v0_1.json"));
    CHECK(r.error == errc::unsupported_config);
    CHECK(r.message.find("Mamba-1") != std::string::npos);
  }
}

TEST_CASE("absent fields take transformers' defaults for the architecture, never a guess") {
  SUBCASE("Nemotron-H without chunk_size: NemotronHConfig's 128") {
    const hf_reading r = read_hf_config(with(fixture("nemotron_h_8b.json"), "chunk_size", ""));
    REQUIRE(r);
    CHECK(r.config->alignment() == 128);
  }
  SUBCASE("Nemotron-H's legacy mamba_chunk_size spelling") {
    const hf_reading r =
        read_hf_config(with(with(fixture("nemotron_h_8b.json"), "chunk_size", ""), "expand", "2, \"mamba_chunk_size\": 256"));
    REQUIRE(r);
    CHECK(r.config->alignment() == 256);
  }
  SUBCASE("Nemotron-H: layers_block_type wins over hybrid_override_pattern, as in NemotronHConfig") {
    const hf_reading r = read_hf_config(with(fixture("nemotron_h_8b.json"), "expand",
                                             "2, \"layers_block_type\": [\"mamba\", \"attention\", \"moe\"]"));
    REQUIRE(r);
    CHECK(r.config->attention_layers() == 1);
    CHECK(r.config->facts().mamba2_layers == 1);
  }
  SUBCASE("Qwen3.5 without head_dim: Qwen3_5TextConfig's 256, not hidden_size // heads (5120 // 24 = 213)") {
    const hf_reading r = read_hf_config(with(fixture("qwen3_5_27b.json"), "head_dim", ""));
    REQUIRE(r);
    CHECK(r.config->bytes_per_kv_block() == 16u * 2 * 4 * 256 * 2 * 16);
  }
  SUBCASE("Falcon-H1 with mamba_d_head \"auto\": mamba_d_ssm / mamba_n_heads") {
    const hf_reading r = read_hf_config(with(fixture("falcon_h1_7b.json"), "mamba_d_head", "\"auto\""));
    REQUIRE(r);
    CHECK(r.config->bytes_per_snapshot() == presets::falcon_h1_7b::bytes_per_snapshot);
  }
  SUBCASE("Falcon-H1 with mamba_d_ssm null: mamba_expand x hidden_size") {
    const hf_reading r = read_hf_config(with(fixture("falcon_h1_7b.json"), "mamba_d_ssm", "null"));
    CHECK(!r); // 2 x 3072 = 6144 != 24 x 128
    CHECK(r.message.find("mamba_expand x hidden_size") != std::string::npos);
  }
  SUBCASE("Llama without head_dim: hidden_size / num_attention_heads") {
    const hf_reading r = read_hf_config(fixture("llama_3_8b.json"));
    REQUIRE(r);
    CHECK(r.config->bytes_per_kv_block() == 32u * 2 * 8 * 128 * 2 * 16);
  }
}

TEST_CASE("inconsistent or missing values are errors naming the field") {
  auto error_of = [](const std::string& json) {
    const hf_reading r = read_hf_config(json);
    CHECK(!r);
    CHECK(!r.config.has_value());
    return r;
  };
  SUBCASE("an indivisible attention head dim") {
    auto r = error_of(with(with(fixture("llama_3_8b.json"), "hidden_size", "5120"), "num_attention_heads", "24"));
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("head_dim") != std::string::npos);
    CHECK(r.message.find("LlamaForCausalLM") != std::string::npos);
  }
  SUBCASE("Falcon-H1's mamba_d_ssm against heads x head dim") {
    auto r = error_of(with(fixture("falcon_h1_7b.json"), "mamba_d_ssm", "4800"));
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("mamba_d_ssm") != std::string::npos);
    CHECK(r.message.find("mamba_d_head") != std::string::npos);
  }
  SUBCASE("Falcon-H1's mamba_n_heads that does not divide mamba_d_ssm") {
    auto r = error_of(with(fixture("falcon_h1_7b.json"), "mamba_n_heads", "25"));
    CHECK(r.message.find("mamba_n_heads") != std::string::npos);
  }
  SUBCASE("a field of the wrong type") {
    auto r = error_of(with(fixture("nemotron_h_8b.json"), "ssm_state_size", "\"128\""));
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("ssm_state_size") != std::string::npos);
    r = error_of(with(fixture("nemotron_h_8b.json"), "ssm_state_size", "0"));
    CHECK(r.message.find("ssm_state_size") != std::string::npos);
    r = error_of(with(fixture("nemotron_h_8b.json"), "ssm_state_size", "4294967296"));
    CHECK(r.message.find("ssm_state_size") != std::string::npos);
  }
  SUBCASE("a required field") {
    auto r = error_of(with(fixture("llama_3_8b.json"), "num_hidden_layers", ""));
    CHECK(r.message.find("num_hidden_layers") != std::string::npos);
  }
  SUBCASE("an unknown layer kind") {
    auto r = error_of(with(fixture("nemotron_h_8b.json"), "hybrid_override_pattern", "\"M*X\""));
    CHECK(r.message.find("'X'") != std::string::npos);
    CHECK(r.message.find("hybrid_override_pattern") != std::string::npos);
  }
  SUBCASE("no layer pattern") {
    auto r = error_of(with(fixture("nemotron_h_8b.json"), "hybrid_override_pattern", ""));
    CHECK(r.message.find("hybrid_override_pattern") != std::string::npos);
  }
  SUBCASE("an unknown architecture and no architecture") {
    auto r = error_of(R"({"architectures": ["RwkvForCausalLM"]})");
    CHECK(r.error == errc::unsupported_config);
    CHECK(r.message.find("RwkvForCausalLM") != std::string::npos);
    r = error_of(R"({"model_type": "llama"})");
    CHECK(r.message.find("architectures") != std::string::npos);
  }
  SUBCASE("not JSON, not an object, not a file") {
    CHECK(error_of("{\"architectures\": [").error == errc::invalid_argument);
    CHECK(error_of("[1, 2]").error == errc::invalid_argument);
    const hf_reading r = read_hf_config_file(fixture_path("no_such_config.json"));
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("no_such_config.json") != std::string::npos);
  }
  SUBCASE("a chunk size without kernels and a misaligned block size are model_config's errors") {
    CHECK(error_of(with(fixture("falcon_h1_7b.json"), "mamba_chunk_size", "100")).error == errc::unsupported_config);
    const hf_reading r = read_hf_config(fixture("nemotron_h_8b.json"), {.block_size = 48});
    CHECK(r.error == errc::misaligned);
    CHECK(r.message.find("48") != std::string::npos);
  }
}

TEST_CASE("dtypes come from the config, with an override") {
  SUBCASE("defaults: KV and conv in the model's dtype, the SSM state in fp32") {
    const hf_reading r = read_hf_config(fixture("nemotron_h_8b.json"));
    REQUIRE(r);
    const auto& m = std::get<mamba2_shape>(r.config->groups()[1].shape);
    CHECK(std::get<kv_shape>(r.config->groups()[0].shape).type == dtype::bf16);
    CHECK(m.conv_type == dtype::bf16);
    CHECK(m.state_type == dtype::f32);
  }
  SUBCASE("torch_dtype float16 and mamba_ssm_cache_dtype") {
    std::string json = with(fixture("nemotron_h_8b.json"), "torch_dtype", "\"float16\", \"mamba_ssm_cache_dtype\": \"bfloat16\"");
    const hf_reading r = read_hf_config(json);
    REQUIRE(r);
    const auto& m = std::get<mamba2_shape>(r.config->groups()[1].shape);
    CHECK(std::get<kv_shape>(r.config->groups()[0].shape).type == dtype::f16);
    CHECK(m.conv_type == dtype::f16);
    CHECK(m.state_type == dtype::bf16);
    CHECK(r.config->bytes_per_snapshot() == 24u * (3 * (128 * 64 + 2 * 8 * 128) * 2 + 128 * 64 * 128 * 2));
  }
  SUBCASE("an FP8 KV cache halves bytes per KV block (compressed-tensors and ModelOpt spellings)") {
    const hf_reading bf16 = read_hf_config(fixture("nemotron_h_8b.json"));
    const hf_reading ct = read_hf_config(with(fixture("nemotron_h_8b.json"), "torch_dtype",
                                              "\"bfloat16\", \"quantization_config\": {\"kv_cache_scheme\": "
                                              "{\"type\": \"float\", \"num_bits\": 8}}"));
    const hf_reading mo = read_hf_config(with(fixture("nemotron_h_8b.json"), "torch_dtype",
                                              "\"bfloat16\", \"quantization_config\": {\"kv_cache_quant_algo\": \"FP8\"}"));
    REQUIRE(bf16);
    REQUIRE(ct);
    REQUIRE(mo);
    CHECK(ct.config->bytes_per_kv_block() * 2 == bf16.config->bytes_per_kv_block());
    CHECK(std::get<kv_shape>(ct.config->groups()[0].shape).type == dtype::f8_e4m3);
    CHECK(mo.config->bytes_per_kv_block() == ct.config->bytes_per_kv_block());
    CHECK(ct.config->bytes_per_snapshot() == bf16.config->bytes_per_snapshot());
  }
  SUBCASE("an unsupported KV quantization is named") {
    const hf_reading r = read_hf_config(with(fixture("nemotron_h_8b.json"), "torch_dtype",
                                             "\"bfloat16\", \"quantization_config\": {\"kv_cache_quant_algo\": \"INT4\"}"));
    CHECK(r.error == errc::unsupported_config);
    CHECK(r.message.find("kv_cache_quant_algo") != std::string::npos);
  }
  SUBCASE("the engine's override wins: FP8 e5m2 KV, fp32 conv window") {
    const hf_reading r = read_hf_config(fixture("nemotron_h_8b.json"),
                                        {.kv_dtype = dtype::f8_e5m2, .conv_dtype = dtype::f32});
    REQUIRE(r);
    CHECK(r.config->bytes_per_kv_block() == 262144 / 2);
    CHECK(r.config->bytes_per_snapshot() == 24u * (3 * (128 * 64 + 2 * 8 * 128) * 4 + 128 * 64 * 128 * 4));
  }
  SUBCASE("an unknown dtype name is named") {
    const hf_reading r = read_hf_config(with(fixture("nemotron_h_8b.json"), "torch_dtype", "\"int3\""));
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("torch_dtype") != std::string::npos);
    CHECK(r.message.find("int3") != std::string::npos);
  }
}

TEST_CASE("dtype names: Reprise's, Hugging Face's and PyTorch's spellings") {
  dtype t{};
  CHECK((parse_dtype("bfloat16", t) && t == dtype::bf16));
  CHECK((parse_dtype("torch.float16", t) && t == dtype::f16));
  CHECK((parse_dtype("float8_e4m3fn", t) && t == dtype::f8_e4m3));
  CHECK((parse_dtype("fp8", t) && t == dtype::f8_e4m3));
  CHECK((parse_dtype("fp8_e5m2", t) && t == dtype::f8_e5m2));
  CHECK((parse_dtype("f8_e5m2", t) && t == dtype::f8_e5m2));
  CHECK(!parse_dtype("int8", t));
  CHECK(t == dtype::f8_e5m2); // unchanged on failure
  CHECK(size_of(dtype::f8_e4m3) == 1);
  CHECK(size_of(dtype::f8_e5m2) == 1);
  CHECK(to_string(dtype::f8_e4m3) == "f8_e4m3");
  CHECK(kv_shape{.kv_heads = 8, .head_dim = 128, .type = dtype::f8_e4m3}.bytes_per_block() == 2u * 8 * 128 * 16);
}

TEST_CASE("a path that is not a config.json file is refused, never read without end or waited on") {
  SUBCASE("a device that never ends") {
    if (!std::filesystem::exists("/dev/zero")) return;
    check_refused("/dev/zero", "not a regular file");
  }
  SUBCASE("a directory") { check_refused(REPRISE_HF_CONFIGS_DIR, "not a regular file"); }
  SUBCASE("a FIFO no one writes to") {
    const scratch_dir dir;
    const auto fifo = dir.path / "config.json";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    check_refused(fifo, "not a regular file");
  }
  SUBCASE("a file over the bound is refused before it is read; one at the bound is read") {
    const scratch_dir dir;
    const auto big = dir.path / "config.json";
    std::ofstream(big) << fixture("llama_3_8b.json");
    std::filesystem::resize_file(big, max_hf_config_bytes + 1); // sparse: no disk written
    check_refused(big, "more than 16 MiB");
    std::filesystem::resize_file(big, max_hf_config_bytes);
    const hf_reading r = read_hf_config_file(big); // the JSON and 16 MiB of NULs after it
    CHECK(r.error == errc::invalid_argument);
    CHECK(r.message.find("not valid JSON") != std::string::npos);
  }
  SUBCASE("a config.json, and a symbolic link to one (the Hugging Face cache's layout), still read") {
    const scratch_dir dir;
    const auto link = dir.path / "config.json";
    std::filesystem::create_symlink(fixture_path("llama_3_8b.json"), link);
    const hf_reading r = read_hf_config_file(link);
    INFO(r.message);
    REQUIRE(r);
    CHECK(r.config->bytes_per_kv_block() == read_hf_config(fixture("llama_3_8b.json")).config->bytes_per_kv_block());
  }
}
