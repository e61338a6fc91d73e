"""The kernel context of a trace in a ``check`` run folder comes from the run's record beside it:
the one enabled CUDA autocast dtype and the recorded TF32 state; an unreadable record gives
none (the kernel names and operators still decide)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.analysis.kernels import KernelContext
from torchdoctor.commands.analyze.trace import run_context
from torchdoctor.record import layout


def _folder(tmp_path: Path, config: Any) -> Path:
    layout.run_file(tmp_path).write_text(json.dumps({"config": config}))
    return layout.trace_file(tmp_path, 0, False)


def test_the_context_comes_from_the_record_beside_the_trace(tmp_path: Path) -> None:
    config = {
        "autocast": [
            {"device": "cuda", "dtype": "bfloat16", "enabled": True},
            {"device": "cpu", "dtype": "float16", "enabled": True},  # not a CUDA region
            {"device": "cuda", "dtype": "float16", "enabled": False},  # off
            {"device_type": "cpu", "dtype": "float16", "enabled": True},  # named as device_type
        ],
        "backend_flags": {"tf32_matmul": True},
    }
    assert run_context(_folder(tmp_path, config)) == KernelContext("bf16", True)


@pytest.mark.parametrize(
    "config",
    [
        {"autocast": [{"dtype": "bfloat16", "enabled": True}, {"dtype": "half", "enabled": True}]},
        {"autocast": "bfloat16", "backend_flags": {"tf32_matmul": "yes"}},
        [1, 2],
    ],
    ids=["two-dtypes", "malformed", "config-a-list"],
)
def test_no_single_dtype_or_a_malformed_record_gives_no_context(
    tmp_path: Path, config: Any
) -> None:
    assert run_context(_folder(tmp_path, config)) == KernelContext(None, None)


def test_an_unreadable_record_gives_none(tmp_path: Path) -> None:
    layout.run_file(tmp_path).write_text("{not json")
    assert run_context(layout.trace_file(tmp_path, 0, False)) is None
    layout.run_file(tmp_path).write_text("[1, 2]")
    assert run_context(layout.trace_file(tmp_path, 0, False)) is None
