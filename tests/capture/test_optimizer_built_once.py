"""check's 'built once' toggle (``capture/toggles.optimizer_built_once``): in the changed steps
an optimizer rebuilt at a watched line takes over the state of the one built there before it, as
one optimizer built before the loop would keep it; in the baseline steps it starts afresh, as
the script wrote it. End to end: check measures the rebuilt optimizer's step that way, on the
case the measurement was built for and on a held-out one (SGD with momentum in a helper)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import check_inprocess

torch = pytest.importorskip("torch")

CASES = Path(__file__).resolve().parent / "cases"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "unlisted" / "optimizer_per_step.py"


def _watch() -> Any:
    from torchdoctor.capture.repeats import RepeatWatch
    from torchdoctor.code_paths import CodePaths

    watch = RepeatWatch(CodePaths())
    watch.install()
    return watch


def _steps(model: Any, n: int) -> list[Any]:
    """``n`` steps, each building its Adam at one line (the line watched); the optimizers."""
    built = []
    for _ in range(n):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # the rebuilt line
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
        built.append(opt)
    return built


def _site() -> str:
    src = Path(__file__).read_text().splitlines()
    (n,) = [i for i, line in enumerate(src, 1) if line.endswith("# the rebuilt line")]
    return f"{Path(__file__).resolve()}:{n}"


def test_changed_steps_keep_the_state_and_baseline_steps_start_afresh() -> None:
    from torchdoctor.capture.toggles import optimizer_built_once

    watch = _watch()
    try:
        toggle = optimizer_built_once(watch, {_site()})
        model = torch.nn.Linear(3, 1)
        toggle.apply()
        kept = _steps(model, 3)
        p = next(model.parameters())
        # one state carried through three optimizers: three steps counted, as one Adam would
        assert int(kept[-1].state[p]["step"]) == 3
        assert kept[-1].state is kept[0].state
        toggle.restore()
        fresh = _steps(model, 2)
        assert int(fresh[-1].state[p]["step"]) == 1  # the script's own: a new state each step
        toggle.apply()
        again = _steps(model, 1)
        # the first changed step after a baseline one takes over the baseline optimizer's state
        assert again[0].state is fresh[-1].state and int(again[0].state[p]["step"]) == 2
        other = torch.nn.Linear(3, 1)
        (mine,) = _steps(other, 1)
        assert int(mine.state[next(other.parameters())]["step"]) == 1  # other parameters: own
        toggle.cleanup()  # type: ignore[misc]
        assert not watch.keep_sites and not watch._last_at
    finally:
        watch.uninstall()


def _measured(tmp: Path, script: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    r = check_inprocess(tmp, script)
    assert r.code == 0, r.stderr
    (toggle,) = [e for e in r.run["experiments"] if e["id"] == "repeated-construction"]
    (f,) = [f for f in r.report["findings"] if f["id"] == "repeated-construction"]
    return toggle, f


@pytest.mark.slow
@pytest.mark.parametrize("script", [EXAMPLE, CASES / "sgd_rebuilt_in_helper.py"])
def test_check_measures_the_rebuilt_optimizer_with_its_state_kept(
    tmp_path: Path, script: Path
) -> None:
    toggle, f = _measured(tmp_path, script)
    assert toggle["toggle"].endswith("built once (its state kept)")
    assert f"{script.name}:" in toggle["toggle"]
    ev = f["evidence"]
    if toggle["ratio"] is None:
        # a machine too busy for four pairs: said why, and the trace's floor is the state cost
        assert toggle["skipped"] or toggle["error"], toggle
        assert "measured" not in ev
        return
    assert ev["measured"]["ratio"] == toggle["ratio"]
    step = f["evidence"]["mean_step_ms"]
    # the saving reads the typical interleaved pair (_run.toggled), the arms' medians without
    ratio = ev.get("pair_ratio", toggle["ratio"])
    kept = max(0.0, (1 - ratio) * step)
    assert ev["state_init_ms_per_step"] == pytest.approx(
        max(kept, ev["trace_state_init_ms_per_step"]), rel=1e-3, abs=1e-3
    )
    assert f["saving_ms_per_step"] == pytest.approx(
        ev["construction_ms_per_step"] + ev["state_init_ms_per_step"], rel=1e-3
    )
