"""Shared test fixtures: where the real-trace corpus lives."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# Absolute, so tests may link to or chdir away from it safely.
TRACES = Path(os.environ.get("TORCHDOCTOR_TRACES", REPO.parent / "shared" / "traces")).absolute()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile ``src/`` to bytecode once (a no-op when it is up to date). Where
    PYTHONDONTWRITEBYTECODE is set, as on the shared test machines, no import writes it, and
    each of the suite's hundreds of ``torchdoctor`` processes (check, its A/B rounds, analyze)
    compiled the modules it imports from source again: ~0.2-0.5 s a process."""
    import compileall

    compileall.compile_dir(REPO / "src", quiet=2)


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The recorded GPU traces (../shared/traces, or $TORCHDOCTOR_TRACES)."""
    if not (TRACES / "MANIFEST.md").is_file():
        pytest.skip(f"real-trace corpus not found at {TRACES} (set TORCHDOCTOR_TRACES)")
    return TRACES


def selected(session: pytest.Session, module: str, test: str) -> bool:
    """Whether this run runs the test function ``test`` of the module named ``module`` (after
    ``-k`` and ``-m``): a fixture that starts a test's slow process ahead of it, so that the
    process runs beside other tests, starts it only then."""
    return any(
        getattr(item, "originalname", "") == test
        and getattr(getattr(item, "module", None), "__name__", "") == module
        for item in session.items
    )


def corpus_file(name: str) -> Path:
    """Path of one corpus trace by its stem; skips the test when the corpus is absent."""
    path = TRACES / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"corpus trace {path} not found (set TORCHDOCTOR_TRACES)")
    return path


@cache
def corpus_report(stem: str) -> Any:
    """``analyze``'s report of one corpus trace by its stem (``h200/...`` for the H200 folder;
    ``api.Report`` wraps it), made once per test run: the width, verdict, Perfetto and HTML
    tests render the same reports, each only reading them. Skips the test when the corpus is
    absent."""
    from torchdoctor.commands.analyze.trace import analyze_path

    return analyze_path(corpus_file(stem))


CPU_RATES_REUSE_S = 60.0
"""How long an in-process check of this test run reuses the CPU rates measured by another."""


@pytest.fixture(autouse=True, scope="session")
def _cpu_rates_reused() -> Iterator[None]:
    """``check`` measures this CPU's rates twice a run (matmuls, a convolution, large copies:
    ~0.5 s each on a 2-core machine, a third of a small script's check). The in-process runs
    of one test run reuse a measurement made in the last ``CPU_RATES_REUSE_S`` for the same
    dtypes and thread count (the machine's load moves slower than that); a run in its own
    process, and a call with another time budget, still measures."""
    from torchdoctor.capture import machine_rates

    measure = machine_rates.measure_cpu
    seen: dict[tuple[tuple[str, ...], int], tuple[float, Any]] = {}

    def reused(
        dtypes: tuple[str, ...] = ("fp32",), budget_s: float = machine_rates.BUDGET_S
    ) -> Any:
        if budget_s != machine_rates.BUDGET_S:
            return measure(dtypes, budget_s)
        import time

        import torch

        key, now = (tuple(dtypes), torch.get_num_threads()), time.monotonic()
        if key in seen and now - seen[key][0] < CPU_RATES_REUSE_S:
            return seen[key][1]
        rates = measure(dtypes)
        seen[key] = (now, rates)
        return rates

    machine_rates.measure_cpu = reused  # type: ignore[assignment]
    yield
    machine_rates.measure_cpu = measure  # type: ignore[assignment]


@pytest.fixture(scope="session")
def shared_check(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """``check`` in this process, made once per test run for each script, arguments and options,
    and read by every test that asks for the same run (``shared_check(script, *args, opts=...,
    html=True)``; the page is ``check.html`` beside the run folder). Such tests only read the
    folder. One intra-op thread, as the ``check`` tests run their scripts; ``threads=None``
    runs it with the test process's own count (part of what makes two runs the same)."""
    import torch

    from tests.capture.check_helpers import FAST, CheckRun, check_inprocess

    runs: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool, int], CheckRun] = {}

    def run(
        script: Path,
        *args: str,
        opts: list[str] = FAST,
        html: bool = False,
        threads: int | None = 1,
    ) -> CheckRun:
        own = torch.get_num_threads()
        n = own if threads is None else threads
        key = (str(script), args, tuple(opts), html, n)
        if key not in runs:
            out = tmp_path_factory.mktemp("shared-check")
            page = ["--html", str(out / "check.html")] if html else []
            torch.set_num_threads(n)
            try:
                runs[key] = check_inprocess(out, script, *args, opts=[*opts, *page])
            finally:
                torch.set_num_threads(own)
        return runs[key]

    return run


@pytest.fixture(autouse=True)
def _torch_global_modes() -> object:
    """Each test leaves torch's global modes as it found them (intra-op threads and their
    environment variables, anomaly mode, deterministic algorithms, grad mode, the default dtype): a script run in-process by one test
    must not change what ``check`` measures in the next (it measures these modes)."""
    import sys

    env_keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    env = {k: os.environ.get(k) for k in env_keys}  # `analyze` in-process sets these to 1
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        _restore_env(env)
        return
    saved = (
        torch.get_num_threads(),
        torch.is_anomaly_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
    )
    yield
    threads, anomaly, deterministic, grad, dtype = saved
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if torch.is_anomaly_enabled() != anomaly:
        torch.autograd.set_detect_anomaly(anomaly)
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        torch.use_deterministic_algorithms(deterministic)
    torch.set_grad_enabled(grad)
    torch.set_default_dtype(dtype)
    _restore_env(env)


def _restore_env(env: dict[str, str | None]) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
