"""The numpy helpers of the analyze path: same values as numpy, without numpy's extra imports."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import corpus_file
from torchdoctor.trace.arrays import distinct, first_index, median, quantile, unique_codes


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 101, 1000])
def test_median_is_numpys_to_the_bit(n: int) -> None:
    rng = np.random.default_rng(n)
    for scale in (1e-3, 1.0, 1e9):
        x = rng.standard_normal(n) * scale
        assert median(x) == float(np.median(x))
        ties = np.round(x[: max(n // 2, 1)]).repeat(2)
        assert median(ties) == float(np.median(ties))
    with_inf = np.array([1.0, np.inf, 3.0, 2.0])
    assert median(with_inf) == float(np.median(with_inf)) == 2.5


def test_median_of_nan_and_of_nothing() -> None:
    assert np.isnan(median(np.array([1.0, np.nan, 2.0])))
    with pytest.raises(ValueError):
        median(np.zeros(0))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # numpy's own inf - inf
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 101])
def test_quantile_is_numpys_to_the_bit(n: int) -> None:
    rng = np.random.default_rng(n)
    for scale in (1e-3, 1.0, 1e9):
        x = rng.standard_normal(n) * scale
        ties = (np.round(x) + 0.0).repeat(2)  # + 0.0: no -0.0 (equal to 0.0, either may be picked)
        infs = np.append(x, [np.inf, -np.inf][: min(n, 2)])
        for values in (x, ties, infs):
            for q in (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9, 1.0):
                want, got = np.float64(np.quantile(values, q)), np.float64(quantile(values, q))
                assert got.tobytes() == want.tobytes() or (np.isnan(got) and np.isnan(want))
    assert quantile([3.0, 1.0, 2.0, 4.0], 0.25) == 1.75  # a list, as the rules pass it
    assert np.isnan(quantile(np.array([1.0, np.nan, 2.0]), 0.5))
    with pytest.raises(ValueError):
        quantile(np.zeros(0), 0.5)


def test_distinct_is_np_unique() -> None:
    ints = np.array([5, -1, 3, 5, 3, -1, 9], dtype=np.int16)
    out = distinct(ints)
    assert out.tolist() == [-1, 3, 5, 9] and out.dtype == np.int16
    strs = np.array(["all_reduce", "broadcast", "all_reduce"])
    assert distinct(strs).tolist() == ["all_reduce", "broadcast"]
    assert len(distinct(np.zeros(0, dtype=np.int64))) == 0


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.int64])
def test_unique_codes_is_np_unique(dtype: type) -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 5, 2000):
        x = rng.integers(0, 120, n).astype(dtype)
        for got, want in zip(
            unique_codes(x), np.unique(x, return_inverse=True, return_counts=True), strict=True
        ):
            assert got.dtype == want.dtype and got.tolist() == want.tolist()
    # negative codes and floats take numpy's own path, with the same results
    for x in (
        np.array([4, -1, 4, 2], dtype=dtype if dtype != np.uint8 else np.int8),
        np.array([2.5, 1.0, 2.5]),
    ):
        got, want = unique_codes(x), np.unique(x, return_inverse=True, return_counts=True)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_first_index_is_np_uniques_return_index() -> None:
    inv = np.array([2, 0, 2, 1, 0, 1, 3])
    assert first_index(inv, 4).tolist() == [1, 3, 0, 6]
    assert first_index(inv, 4).tolist() == np.unique(inv, return_index=True)[1].tolist()
    assert len(first_index(np.zeros(0, dtype=np.intp), 0)) == 0


_PROBE = """
import atexit, sys
watched = ("numpy.ma", "torchdoctor.commands.analyze.ranks", "torchdoctor.analysis.cross_rank",
           "torchdoctor.record.run", "rich", "torch")
atexit.register(lambda: print("LOADED", sorted(m for m in watched if m in sys.modules)))
sys.argv = ["torchdoctor", "analyze", "--json", sys.argv[1]]
from torchdoctor.cli import main
main()
"""


@pytest.mark.parametrize("stem", ["a100_ddp_convnet_nccl", "a100_alexnet_syncs_pageable"])
def test_analyze_json_of_one_trace_skips_what_it_does_not_use(stem: str) -> None:
    """Collectives (np.unique by kind), pageable copies (union of rows), launch medians: the
    paths that used to import numpy.ma; one trace needs no rank-folder or run-level modules."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(corpus_file(stem))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().splitlines()[-1] == "LOADED []"
