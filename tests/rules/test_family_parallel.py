"""The nn.DataParallel family (``rules/families/parallel.py``): one spec measured on a trace and
on a check run; here the run's rule, from hand-written check records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import parallel as par
from torchdoctor.rules.registry import REGISTRY, finding_ids
from torchdoctor.rules.spec import RunRule, TraceRule

TRACE, RUN = par.RULES


def test_one_spec_two_rules_one_registry_entry() -> None:
    assert isinstance(TRACE, TraceRule) and isinstance(RUN, RunRule)
    assert TRACE.spec is RUN.spec is REGISTRY["data-parallel"]
    assert finding_ids().count("data-parallel") == 1


def test_a_data_parallel_built_in_the_run_is_worded_as_built() -> None:
    f = fire(RUN, record(step_ms=50.0, config={"data_parallel": [{"device_ids": [0, 1]}]}))
    assert f is not None and f.id == "data-parallel"
    assert f.title == "nn.DataParallel in use: one process drives every GPU"
    # DATA_PARALLEL_SHARE (23%) of the 50 ms step, the estimate analyze gives a trace too
    assert f.saving_ms_per_step == pytest.approx(11.5) and f.severity == "warning"
    assert f.fix.startswith("torchrun --nproc_per_node=NGPU train.py")
    assert f.explanation.startswith("DataParallel scatters inputs")
    assert f.evidence["data_parallel"] == [{"device_ids": [0, 1]}]


def test_no_data_parallel_is_quiet() -> None:
    assert fire(RUN, record(config={"data_parallel": []})) is None
    assert fire(RUN, record()) is None
