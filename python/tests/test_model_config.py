"""ModelConfig from Hugging Face config.json files: every supported family, every preset against its checkpoint's
config.json, transformers' defaults where a field is absent, dtypes, and clear errors for what Reprise does not
support. The configs are the fixtures the C++ reader's tests read too (tests/data/hf_configs/: the public field
values of the checkpoints' config.json files, fields that do not affect state sizes left out)."""

import json
import os
import pathlib

import pytest

import reprise

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "hf_configs"


def fixture(name):
    return json.loads((FIXTURES / name).read_text())


NEMOTRON_H_8B = fixture("nemotron_h_8b.json")  # nvidia/Nemotron-H-8B-Base-8K
QWEN3_NEXT_80B_A3B = fixture("qwen3_next_80b_a3b.json")  # Qwen/Qwen3-Next-80B-A3B-Instruct
QWEN3_5_27B = fixture("qwen3_5_27b.json")  # Qwen/Qwen3.5-27B: fields nested in text_config
FALCON_H1_7B = fixture("falcon_h1_7b.json")  # tiiuae/Falcon-H1-7B-Base
GRANITE_4_H_SMALL = fixture("granite_4_h_small.json")  # ibm-granite/granite-4.0-h-small
BAMBA_9B = fixture("bamba_9b.json")  # ibm-ai-platform/Bamba-9B
LLAMA_3_8B = fixture("llama_3_8b.json")  # meta-llama/Meta-Llama-3-8B
JAMBA = fixture("jamba_v0_1.json")  # ai21labs/Jamba-v0.1

MiB = 1 << 20


def test_nemotron_h_8b_matches_the_preset():
    c = reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B)
    preset = reprise.ModelConfig.preset("nemotron-h-8b")
    assert (c.attention_layers, c.mamba2_layers, c.gated_delta_layers) == (4, 24, 0)
    assert c.bytes_per_snapshot == preset.bytes_per_snapshot == 102137856  # 97.4 MiB
    assert round(c.bytes_per_snapshot / MiB, 1) == 97.4
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block == 4 * 2 * 8 * 128 * 2 * 16
    # The checkpoint's chunk_size (128) sets the alignment, in the preset too.
    assert c.alignment == preset.alignment == 128


@pytest.mark.parametrize("preset, file", [("nemotron-h-8b", "nemotron_h_8b.json"),
                                          ("qwen3-next-80b-a3b", "qwen3_next_80b_a3b.json"),
                                          ("falcon-h1-7b", "falcon_h1_7b.json"),
                                          ("llama-3-8b", "llama_3_8b.json")])
def test_every_preset_equals_its_checkpoint(preset, file):
    c = reprise.ModelConfig.from_hf_config(FIXTURES / file)  # a path: the file itself
    p = reprise.ModelConfig.preset(preset)
    assert c.groups == p.groups
    assert (c.bytes_per_kv_block, c.bytes_per_snapshot, c.alignment, c.block_size) == \
        (p.bytes_per_kv_block, p.bytes_per_snapshot, p.alignment, p.block_size)


def test_nemotron_h_layers_block_type_spelling():
    kinds = {"M": "mamba", "*": "attention", "-": "mlp"}
    spelled = {k: v for k, v in NEMOTRON_H_8B.items() if k != "hybrid_override_pattern"}
    spelled["layers_block_type"] = [kinds[c] for c in NEMOTRON_H_8B["hybrid_override_pattern"]]
    c = reprise.ModelConfig.from_hf_config(spelled)
    assert (c.attention_layers, c.mamba2_layers) == (4, 24) and c.bytes_per_snapshot == 102137856


def test_qwen3_next_80b_matches_the_preset():
    c = reprise.ModelConfig.from_hf_config(QWEN3_NEXT_80B_A3B)
    preset = reprise.ModelConfig.preset("qwen3-next-80b-a3b")
    assert (c.attention_layers, c.gated_delta_layers) == (12, 36)
    assert c.bytes_per_snapshot == preset.bytes_per_snapshot == 77266944  # 73.7 MiB
    assert round(c.bytes_per_snapshot / MiB, 1) == 73.7
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block
    assert c.alignment == preset.alignment == 64


def test_qwen3_5_reads_text_config_and_layer_types():
    c = reprise.ModelConfig.from_hf_config(QWEN3_5_27B)
    assert (c.attention_layers, c.gated_delta_layers) == (16, 48)
    delta = next(shape for shape, _ in c.groups if isinstance(shape, reprise.GatedDeltaShape))
    assert (delta.key_heads, delta.value_heads, delta.key_dim, delta.value_dim) == (16, 48, 128, 128)
    assert c.bytes_per_snapshot == 48 * (3 * (2 * 16 * 128 + 48 * 128) * 2 + 48 * 128 * 128 * 4)


def test_falcon_h1_7b_matches_the_preset():
    c = reprise.ModelConfig.from_hf_config(FALCON_H1_7B)
    preset = reprise.ModelConfig.preset("falcon-h1-7b")
    assert (c.attention_layers, c.mamba2_layers) == (44, 44)  # attention and Mamba2 side by side
    assert c.bytes_per_snapshot == preset.bytes_per_snapshot == 139358208  # 132.9 MiB
    assert round(c.bytes_per_snapshot / MiB, 1) == 132.9
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block
    assert c.alignment == preset.alignment == 128


def test_granite_4_h_small():
    c = reprise.ModelConfig.from_hf_config(GRANITE_4_H_SMALL)
    assert (c.attention_layers, c.mamba2_layers) == (4, 36)
    mamba = next(shape for shape, _ in c.groups if isinstance(shape, reprise.Mamba2Shape))
    assert (mamba.heads, mamba.head_dim, mamba.state_dim, mamba.groups, mamba.chunk) == (128, 64, 128, 1, 256)
    assert c.bytes_per_snapshot == 36 * (3 * (128 * 64 + 2 * 128) * 2 + 128 * 64 * 128 * 4)
    assert c.bytes_per_kv_block == 4 * 2 * 8 * (4096 // 32) * 2 * 16


def test_granite_head_dim_auto_is_derived():
    c = reprise.ModelConfig.from_hf_config({**GRANITE_4_H_SMALL, "mamba_d_head": "auto"})
    assert c.bytes_per_snapshot == reprise.ModelConfig.from_hf_config(GRANITE_4_H_SMALL).bytes_per_snapshot


def test_granite_layer_types_as_transformers_5_writes_them():
    # transformers 5 writes GraniteMoeHybrid's layer_types as 'linear_attention' / 'full_attention'.
    kinds = GRANITE_4_H_SMALL["layer_types"]
    renamed = ["linear_attention" if k == "mamba" else "full_attention" for k in kinds]
    c = reprise.ModelConfig.from_hf_config({**GRANITE_4_H_SMALL, "layer_types": renamed})
    assert (c.attention_layers, c.mamba2_layers) == (4, 36)
    assert c.bytes_per_snapshot == reprise.ModelConfig.from_hf_config(GRANITE_4_H_SMALL).bytes_per_snapshot


def test_bamba_9b():
    c = reprise.ModelConfig.from_hf_config(BAMBA_9B)
    assert (c.attention_layers, c.mamba2_layers) == (3, 29)
    assert c.bytes_per_snapshot == 29 * (3 * (128 * 64 + 2 * 128) * 2 + 128 * 64 * 128 * 4)


def test_llama_is_attention_only():
    c = reprise.ModelConfig.from_hf_config(LLAMA_3_8B)
    preset = reprise.ModelConfig.preset("llama-3-8b")
    assert not c.has_recurrent and c.attention_layers == 32
    assert c.bytes_per_kv_block == preset.bytes_per_kv_block == 32 * 2 * 8 * 128 * 2 * 16
    assert c.bytes_per_snapshot == 0


@pytest.mark.parametrize("block_size", [8, 16, 32, 64, 128, 256])
def test_block_sizes_reach_the_cache(block_size):
    c = reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B, block_size=block_size)
    assert c.block_size == block_size and c.alignment == max(block_size, 128)
    cache = reprise.PrefixCache(c, "memory_only", kv_blocks=16)
    assert cache.block_size == block_size


def test_an_unsupported_block_size_is_refused_by_the_cache():
    c = reprise.ModelConfig.from_hf_config(LLAMA_3_8B, block_size=48)
    with pytest.raises(reprise.UnsupportedConfig):
        reprise.PrefixCache(c, "block_sharing", kv_blocks=16)


def test_block_size_that_does_not_divide_the_chunk_is_misaligned():
    with pytest.raises(reprise.Misaligned):
        reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B, block_size=48)


def test_jamba_names_mamba1():
    with pytest.raises(ValueError, match="Mamba-1"):
        reprise.ModelConfig.from_hf_config(JAMBA)


def test_unknown_architecture_is_named():
    with pytest.raises(ValueError, match="RwkvForCausalLM"):
        reprise.ModelConfig.from_hf_config({"architectures": ["RwkvForCausalLM"]})
    with pytest.raises(ValueError, match="architectures"):
        reprise.ModelConfig.from_hf_config({"model_type": "llama"})


def test_missing_field_is_named():
    broken = {k: v for k, v in LLAMA_3_8B.items() if k != "num_hidden_layers"}
    with pytest.raises(reprise.InvalidArgument, match="num_hidden_layers"):
        reprise.ModelConfig.from_hf_config(broken)


def test_absent_fields_take_transformers_defaults():
    def without(config, key):
        return {k: v for k, v in config.items() if k != key}
    # NemotronHConfig: chunk_size 128, ssm_state_size 128.
    assert reprise.ModelConfig.from_hf_config(without(NEMOTRON_H_8B, "chunk_size")).alignment == 128
    assert reprise.ModelConfig.from_hf_config(without(NEMOTRON_H_8B, "ssm_state_size")).bytes_per_snapshot == \
        reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B).bytes_per_snapshot
    # Qwen3_5TextConfig: head_dim 256, not hidden_size // num_attention_heads (5120 // 24 = 213).
    text = without(QWEN3_5_27B["text_config"], "head_dim")
    c = reprise.ModelConfig.from_hf_config({**QWEN3_5_27B, "text_config": text})
    kv = next(shape for shape, _ in c.groups if isinstance(shape, reprise.KvShape))
    assert kv.head_dim == 256


def test_inconsistent_values_name_the_field():
    with pytest.raises(reprise.InvalidArgument, match="head_dim"):
        reprise.ModelConfig.from_hf_config({**LLAMA_3_8B, "hidden_size": 5120, "num_attention_heads": 24})
    with pytest.raises(reprise.InvalidArgument, match="mamba_d_ssm"):
        reprise.ModelConfig.from_hf_config({**FALCON_H1_7B, "mamba_d_ssm": 4800})  # 24 x 128 = 3072
    with pytest.raises(reprise.InvalidArgument, match="ssm_state_size"):
        reprise.ModelConfig.from_hf_config({**NEMOTRON_H_8B, "ssm_state_size": "128"})


def test_dtypes_come_from_the_config_with_an_override():
    base = reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B)
    kv, mamba = (shape for shape, _ in base.groups)
    assert (kv.dtype, mamba.conv_dtype, mamba.state_dtype) == ("bf16", "bf16", "f32")
    fp8 = reprise.ModelConfig.from_hf_config(
        {**NEMOTRON_H_8B, "quantization_config": {"kv_cache_scheme": {"type": "float", "num_bits": 8}}})
    assert fp8.bytes_per_kv_block * 2 == base.bytes_per_kv_block == 262144
    assert fp8.groups[0][0].dtype == "f8_e4m3"
    e5m2 = reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B, kv_dtype="f8_e5m2", conv_dtype="f32")
    assert e5m2.bytes_per_kv_block == 131072
    assert e5m2.bytes_per_snapshot == 24 * (3 * (128 * 64 + 2 * 8 * 128) * 4 + 128 * 64 * 128 * 4)
    half = reprise.ModelConfig.from_hf_config({**NEMOTRON_H_8B, "torch_dtype": "float16",
                                               "mamba_ssm_cache_dtype": "bfloat16"})
    kv, mamba = (shape for shape, _ in half.groups)
    assert (kv.dtype, mamba.conv_dtype, mamba.state_dtype) == ("f16", "f16", "bf16")
    with pytest.raises(reprise.InvalidArgument, match="torch_dtype"):
        reprise.ModelConfig.from_hf_config({**NEMOTRON_H_8B, "torch_dtype": "int3"})
    with pytest.raises(ValueError, match="dtype"):
        reprise.ModelConfig.from_hf_config(NEMOTRON_H_8B, kv_dtype="int8")
    assert reprise.KvShape(kv_heads=8, head_dim=128, dtype="f8_e4m3").bytes_per_block == 2 * 8 * 128 * 16


def test_config_inputs():
    assert reprise.ModelConfig.from_hf_config(str(FIXTURES / "nemotron_h_8b.json")).alignment == 128
    with pytest.raises(reprise.InvalidArgument, match="no_such_config.json"):
        reprise.ModelConfig.from_hf_config(FIXTURES / "no_such_config.json")
    with pytest.raises(TypeError):
        reprise.ModelConfig.from_hf_config(42)


def test_a_path_that_is_not_a_config_file_is_refused_unread(tmp_path):
    # A device that never ends, a directory, a FIFO no one writes to: refused before they are opened.
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in [p for p in [pathlib.Path("/dev/zero")] if p.exists()] + [FIXTURES, fifo]:
        with pytest.raises(reprise.InvalidArgument, match="not a regular file") as refused:
            reprise.ModelConfig.from_hf_config(path)
        assert str(path) in str(refused.value)
    # Over the bound (16 MiB, a thousand times a large config.json): refused before it is read. The file is
    # sparse, so no disk is written.
    big = tmp_path / "config.json"
    big.write_text((FIXTURES / "llama_3_8b.json").read_text())
    os.truncate(big, 16 * MiB + 1)
    with pytest.raises(reprise.InvalidArgument, match="more than 16 MiB") as refused:
        reprise.ModelConfig.from_hf_config(big)
    assert str(big) in str(refused.value)
    # A config.json, here through a symbolic link as in the Hugging Face cache, still reads.
    link = tmp_path / "linked.json"
    link.symlink_to(FIXTURES / "llama_3_8b.json")
    assert reprise.ModelConfig.from_hf_config(link).bytes_per_kv_block == \
        reprise.ModelConfig.from_hf_config(LLAMA_3_8B).bytes_per_kv_block


def test_unknown_layer_kind_is_named():
    with pytest.raises(ValueError, match="sliding_attention"):
        reprise.ModelConfig.from_hf_config({**QWEN3_NEXT_80B_A3B, "layer_types": ["sliding_attention"] * 48})
    with pytest.raises(ValueError, match="'X'"):
        reprise.ModelConfig.from_hf_config({**NEMOTRON_H_8B, "hybrid_override_pattern": "M*X"})


def test_unsupported_shape_is_an_errc():
    with pytest.raises(reprise.UnsupportedConfig):
        reprise.ModelConfig.from_hf_config({**FALCON_H1_7B, "mamba_chunk_size": 100})


def test_shapes_by_hand():
    c = reprise.ModelConfig([(reprise.KvShape(kv_heads=8, head_dim=128), 4),
                             (reprise.Mamba2Shape(heads=128, head_dim=64, state_dim=128, groups=8), 24)])
    assert c.bytes_per_snapshot == 102137856 and c.alignment == 256
    with pytest.raises(reprise.InvalidArgument):
        reprise.ModelConfig([])
    with pytest.raises(TypeError):
        reprise.ModelConfig([("attention", 4)])
    with pytest.raises(ValueError, match="dtype"):
        reprise.KvShape(kv_heads=8, head_dim=128, dtype="int8")
