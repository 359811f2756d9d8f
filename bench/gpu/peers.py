# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The peers' prefill entry points, imported from the GPU kit (scripts/gpu-gather.sh puts their Python code
under <kit>/python/).

- mamba_ssm: `mamba_chunk_scan_combined` and `_mamba_chunk_scan_combined_fwd` (the Triton SSD). The package's
  own `__init__` imports its CUDA extension (selective scan), which the kit does not build; the Triton ops
  do not need it, so the package is entered through a bare module object that only sets its search path.
- flash-linear-attention: `chunk_gated_delta_rule` (pure Python + Triton).
"""
from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path


def add_kit(kit: Path) -> None:
    """Puts the kit's Python folder first on the import path."""
    py = Path(kit) / "python"
    if not py.is_dir():
        raise SystemExit(f"peers: {py} not found; run scripts/gpu-gather.sh first")
    sys.path.insert(0, str(py))


def _bare_package(name: str) -> None:
    """Registers package `name` without running its __init__ (its submodules import normally)."""
    if name in sys.modules:
        return
    for entry in sys.path:
        path = Path(entry) / name
        if (path / "__init__.py").is_file():
            mod = types.ModuleType(name)
            mod.__path__ = [str(path)]
            mod.__file__ = str(path / "__init__.py")
            sys.modules[name] = mod
            return
    raise ImportError(f"peers: package {name} not on the path")


def mamba_ssd():
    """(mamba_chunk_scan_combined, _mamba_chunk_scan_combined_fwd, version)."""
    _bare_package("mamba_ssm")
    m = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    init = Path(sys.modules["mamba_ssm"].__file__).read_text()
    version = next((l.split("=")[1].strip().strip('"') for l in init.splitlines() if l.startswith("__version__")), "?")
    return m.mamba_chunk_scan_combined, m._mamba_chunk_scan_combined_fwd, version


def fla_gated_delta(entry: str = "chunk"):
    """(fla's `<entry>_gated_delta_rule`, version). `chunk` is the peer; `fused_recurrent` (same arguments, a
    token-by-token Triton kernel) serves the CPU validation, where the chunk kernels do not run in Triton's
    interpreter."""
    m = importlib.import_module("fla.ops.gated_delta_rule")
    fla = sys.modules.get("fla")
    return getattr(m, f"{entry}_gated_delta_rule"), getattr(fla, "__version__", "?")


def cpu_shims() -> None:
    """For validation on a machine without a GPU (TRITON_INTERPRET=1, tensors on the CPU). Only the CPU mode
    installs these; the device run imports the peers untouched. The peers enter
    `torch.cuda.device(t.device.index)` around their launches, which fails for a CPU tensor (index None)."""
    import contextlib

    import torch

    real = torch.cuda.device

    def device(index):
        return contextlib.nullcontext() if index is None else real(index)

    torch.cuda.device = device

    # Triton's autotuner times each configuration through the active GPU driver, which the interpreter lacks:
    # every configuration is then "equally fast" and the first one is used.
    from triton.runtime import autotuner

    autotuner.Autotuner._bench = lambda self, *args, config, **kwargs: [0.0, 0.0, 0.0]
