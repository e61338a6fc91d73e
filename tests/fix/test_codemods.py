"""Each codemod on hand-written before/after sources (``fixtures/<codemod>/<case>.in.py`` and
``.out.py``, written by hand, not by the tool): the edit, comments and formatting kept, and a
second run that changes nothing. The edit's anchor is the line marked ``# target``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchdoctor.fix.diff import line_map
from torchdoctor.fix.model import Refusal, Rewrite, Target
from torchdoctor.fix.registry import CODEMODS

FIXTURES = Path(__file__).parent / "fixtures"

PARAMS: dict[str, dict[str, Any]] = {
    "dataloader-args/one_line": {
        "changes": {"num_workers": "2", "persistent_workers": "True", "prefetch_factor": "4"}
    },
    "dataloader-args/multi_line": {
        "changes": {"num_workers": "2", "persistent_workers": "True", "pin_memory": "True"}
    },
    "dataloader-args/positional": {"changes": {"num_workers": "2", "persistent_workers": "True"}},
    "non-blocking-copies/loop": {"loader": "loader"},
    "fused-optimizer/adam_foreach": {"class": "Adam", "impl": "fused"},
    "fused-optimizer/adamw_multiline": {"class": "AdamW", "impl": "fused"},
    "compile-model/insert": {"model": "model"},
    "compile-model/next_mode": {"mode": "reduce-overhead"},
    "sync-every-n/accumulator": {"every": 10},
    "sync-every-n/log_line": {"every": 20},
    "anomaly-off/set_true": {},
    "anomaly-off/context": {},
    "inference-mode/eval_loop": {},
    "mark-dynamic/before_call": {"expr": "tokens", "dim": 1, "sizes": "114, 123"},
    "bf16-autocast/train_step": {},
    "tf32-matmul/imports": {},
}
CASES = sorted(str(p.relative_to(FIXTURES))[: -len(".in.py")] for p in FIXTURES.glob("*/*.in.py"))


def target_line(source: str) -> int:
    lines = [i for i, ln in enumerate(source.splitlines(), 1) if ln.endswith("# target")]
    assert len(lines) == 1, "one line per fixture is marked # target"
    return lines[0]


def run(case: str, source: str, line: int | None = None) -> Rewrite | Refusal:
    codemod = case.split("/")[0]
    target = Target(codemod, "/nowhere.py", line or target_line(source), PARAMS[case])
    return CODEMODS[codemod].rewrite(source, target)


def test_every_fixture_has_params_and_an_expected_output() -> None:
    assert set(CASES) == set(PARAMS)
    for case in CASES:
        assert (FIXTURES / f"{case}.out.py").is_file(), case
    assert {c.split("/")[0] for c in CASES} == set(CODEMODS)  # every codemod has a fixture


@pytest.mark.parametrize("case", CASES)
def test_codemod_rewrites_as_written_by_hand(case: str) -> None:
    before = (FIXTURES / f"{case}.in.py").read_text()
    expected = (FIXTURES / f"{case}.out.py").read_text()
    result = run(case, before)
    assert isinstance(result, Rewrite), result
    assert result.source == expected
    assert result.summary


@pytest.mark.parametrize("case", CASES)
def test_second_run_changes_nothing(case: str) -> None:
    before = (FIXTURES / f"{case}.in.py").read_text()
    after = (FIXTURES / f"{case}.out.py").read_text()
    again = run(case, after, line_map(before, after)(target_line(before)))
    assert isinstance(again, Refusal) and again.already, again


@pytest.mark.parametrize("case", CASES)
def test_every_comment_survives(case: str) -> None:
    before = (FIXTURES / f"{case}.in.py").read_text()
    after = (FIXTURES / f"{case}.out.py").read_text()
    comments = [ln.split("#", 1)[1] for ln in before.splitlines() if "#" in ln]
    for c in comments:
        assert c in after
