"""The DataLoader hooks hand over ``LoaderConfig`` rows (``record/run.py``), and the session
the whole ``config`` section as one ``RunConfig``: written by ``typed.recorded`` with the keys
``run.json`` has always had, in their order, and read back typed."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.options import CheckOptions
from torchdoctor.record.rows import Checkpointing, ConstructionCall, ForwardCalls
from torchdoctor.record.run import LoaderConfig, RunConfig, RunRecord
from torchdoctor.record.typed import recorded

torch = pytest.importorskip("torch")

# what a loader's row has always recorded, in this order (``usage`` once it was iterated)
SETTINGS = [
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "batch_size",
    "drop_last",
    "dataset",
    "dataset_len",
    "multiprocessing_context",
    "cpu_count",
    "cpus_per_rank",
]


class _Quiet:
    """A clock's recorder that records nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *a: None


def _hooked_loader_rows() -> tuple[list[LoaderConfig], int]:
    from torch.utils.data import DataLoader

    from torchdoctor.capture.hooks import StepHooks

    clock = StepClock(CheckOptions(warmup_steps=100, profile_steps=1, clean_steps=0), _Quiet())
    hooks = StepHooks(clock)
    hooks.install()
    try:
        line = sys._getframe().f_lineno + 1
        loader = DataLoader(list(range(8)), batch_size=4, drop_last=True)
        batches = sum(1 for _ in loader)
    finally:
        hooks.uninstall()
    snapshot = hooks.snapshot()
    assert snapshot["batches"] == batches == 2
    return snapshot["dataloaders"], line


def test_a_loader_the_script_built_is_recorded_in_the_records_order() -> None:
    (row,), line = _hooked_loader_rows()
    assert (row.num_workers, row.batch_size, row.drop_last, row.dataset) == (0, 4, True, "list")
    assert row.dataset_len == 8 and row.usage["iters"] == 1
    assert row.explicit == {"dataset": "list(...)", "batch_size": "4", "drop_last": "True"}
    assert row.call is not None and row.call.site == f"{__file__}:{line}"
    assert (row.call.func, row.call.args) == ("DataLoader", ("list(range(8))",))
    was = recorded(row)
    assert list(was) == [*SETTINGS, "explicit", "call", "usage"]
    assert list(was["call"]) == ["site", "func", "args", "kwargs"]
    back = LoaderConfig.from_dict(json.loads(json.dumps(was)))
    assert json.dumps(recorded(back)) == json.dumps(was)  # read and written back as it was
    assert back.call == ConstructionCall(
        row.call.site, "DataLoader", row.call.args, row.call.kwargs, raw=was["call"]
    )


def test_what_a_loader_adds_is_recorded_after_its_settings_and_only_when_held() -> None:
    warned = LoaderConfig(
        num_workers=4,
        built_in="/lib/data.py:3",
        call=ConstructionCall("/u/train.py:9"),
        torch_warnings=("too many workers",),
    )
    assert list(recorded(warned)) == [*SETTINGS, "built_in", "call", "torch_warnings"]
    assert recorded(warned)["call"] == {"site": "/u/train.py:9"}
    # settings that could not be read: the error, and the fields a reader gets by default
    failed = LoaderConfig.from_dict(recorded(LoaderConfig(error="TypeError: odd loader")))
    assert (failed.error, failed.num_workers, failed.call, failed.explicit) == (
        "TypeError: odd loader",
        0,
        None,
        None,
    )


def test_the_config_section_is_one_row_in_the_records_order() -> None:
    loaders, _ = _hooked_loader_rows()
    config = RunConfig(
        dataloaders=loaders,
        data_parallel=[],
        batches=2,
        forward_steps=ForwardCalls(3, "Net"),
        checkpointing=Checkpointing(),
    )
    was = recorded(config)
    assert list(was) == [
        "autocast",
        "grad_scalers",
        "data_parallel",
        "ddp",
        "optimizers",
        "backend_flags",
        "dataloaders",
        "batches",
        "optimizer_steps",
        "backward_calls",
        "measured_backward_calls",
        "measured_optimizer_steps",
        "forward_steps",
        "checkpointing",
        "housekeeping",
    ]
    run = RunRecord.from_dict(json.loads(json.dumps({"config": was})))
    assert run.config.batches == 2 and run.config.forward_steps.model == "Net"
    assert run.config.dataloaders[0].batch_size == 4
    assert json.dumps(run.config.to_dict()) == json.dumps(was)
