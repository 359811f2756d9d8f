# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The package surface: docstrings on every public name, type stubs shipped next to the module."""

import inspect
import pathlib

import reprise


def public(obj):
    return [(n, getattr(obj, n)) for n in dir(obj) if not n.startswith("_")]


def test_every_public_name_has_a_docstring():
    assert reprise.__doc__ and reprise._reprise.__doc__
    missing = []
    modules = [reprise] + ([reprise.ops] if reprise.HAS_OPS else [])
    for module in modules:
        for name, obj in public(module):
            if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
                continue  # constants (ERRORS, POLICIES, HAS_OPS) are described in the package docstring
            if not (obj.__doc__ or "").strip():
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for member, value in public(obj):
                    if not (getattr(value, "__doc__", None) or "").strip():
                        missing.append(f"{name}.{member}")
    assert not missing, missing


def test_type_stubs_are_shipped():
    stubs = pathlib.Path(reprise._reprise.__file__).parent / "_reprise"
    assert (stubs / "__init__.pyi").is_file() and (pathlib.Path(reprise.__file__).parent / "py.typed").is_file()
    text = (stubs / "__init__.pyi").read_text()
    assert "class PrefixCache" in text and "def admit(self, seq_id: int, tokens: numpy.typing.ArrayLike" in text
    assert "class Transfers" in text and "def take_transfers(self) -> Transfers" in text
    assert "class FetchPlan" in text and "def probe(self, tokens: numpy.typing.ArrayLike" in text
    assert "NO_UNIT: int" in text and "def kv_units(self) -> list[int]" in text
    assert "remote_turn_ends: bool = False, remote_writer_id: int = 0" in text
    assert "class StateRouter" in text and "def route(self, tokens: numpy.typing.ArrayLike" in text
    assert "def take_state_events(self) -> list[StateEvent]" in text and "state_events: FleetKeys | None" in text
    if reprise.HAS_OPS:
        assert "def mamba2_ssd_prefill" in (stubs / "ops.pyi").read_text()
        assert "def transfer_units" in (stubs / "ops.pyi").read_text()
