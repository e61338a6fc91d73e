"""Operator table: nesting, self times and device attribution, by hand and against raw JSON."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.analysis.rawjson import GPU_CATS, LAUNCH_CATS, corr, events
from tests.analysis.synth import EVERYTHING, kernel, launch, make_table, op, steps_of
from torchdoctor.analysis.operators import analyze_operators
from torchdoctor.trace.steps import find_steps


def _nested() -> Any:
    return make_table(
        [
            op("aten::linear", 0, 100),
            op("aten::addmm", 10, 20),
            op("aten::mm", 12, 8),
            op("aten::empty", 15, 0),  # zero-length child of aten::mm
            op("aten::addmm", 40, 50),
            op("aten::t", 40, 5),  # same start as its parent
            op("aten::copy_", 5, 45, tid=2),  # another thread: not a child of aten::linear
            launch(16, 1, corr=1),  # inside aten::mm
            launch(35, 1, corr=2),  # inside aten::linear, between its children
            launch(20, 1, corr=3, tid=2),  # inside aten::copy_
            launch(200, 1, corr=4),  # outside every operator
            kernel("k1", 101, 7, corr=1),
            kernel("k2", 110, 3, corr=2),
            kernel("k3", 120, 11, corr=3),
            kernel("k4", 210, 2, corr=4),
        ]
    )


def test_hand_built_nesting() -> None:
    s = analyze_operators(_nested(), steps_of((0, 300)), top_n=10)
    rows = {r.name: r for r in s.top_by_self_cpu}
    expected = {
        "aten::linear": (1, 0.100, 0.030, 0.010, 0.003),
        "aten::addmm": (2, 0.070, 0.057, 0.007, 0.0),
        "aten::copy_": (1, 0.045, 0.045, 0.011, 0.011),
        "aten::mm": (1, 0.008, 0.008, 0.007, 0.007),
        "aten::t": (1, 0.005, 0.005, 0.0, 0.0),
    }
    assert set(rows) == set(expected)
    for name, want in expected.items():
        r = rows[name]
        got = (r.calls, r.total_cpu_ms, r.self_cpu_ms, r.total_device_ms, r.self_device_ms)
        assert got == pytest.approx(want), name
    assert [r.name for r in s.top_by_self_device] == ["aten::copy_", "aten::mm", "aten::linear"]
    assert (s.call_count, s.name_count) == (7, 6)
    assert (s.device_ms, s.attributed_device_ms) == pytest.approx((0.023, 0.021))
    assert rows["aten::addmm"].mean_cpu_us == pytest.approx(35.0)
    json.dumps(s.to_dict())


def test_window_keeps_operators_starting_inside() -> None:
    s = analyze_operators(_nested(), steps_of((10, 30)), top_n=10)
    assert {r.name for r in s.top_by_self_cpu} == {"aten::addmm", "aten::mm"}
    assert s.call_count == 3  # aten::addmm, aten::mm, aten::empty


def test_no_operators() -> None:
    s = analyze_operators(make_table([kernel("k", 1, 1)]), steps_of((0, 10)))
    assert (s.call_count, s.top_by_self_cpu, s.top_by_self_device) == (0, (), ())
    assert (s.device_ms, s.attributed_device_ms) == (0.001, 0.0)


def _brute(trace: dict[str, Any]) -> tuple[dict[str, float], ...]:
    """Self CPU, self device, total device and total CPU µs per name by O(n^2) containment
    search; a call inside a call of the same name counts once in the totals."""
    ops = events(trace, {"cpu_op"})
    key = [(o["pid"], o["tid"]) for o in ops]

    def innermost(pid_tid: Any, t0: float, t1: float, skip: int = -1) -> int:
        best, best_dur = -1, float("inf")
        for j, o in enumerate(ops):
            inside = o["ts"] <= t0 and t1 <= o["ts"] + o["dur"]
            if j != skip and key[j] == pid_tid and inside and o["dur"] < best_dur:
                best, best_dur = j, o["dur"]
        return best

    parent = [innermost(key[i], o["ts"], o["ts"] + o["dur"], i) for i, o in enumerate(ops)]

    def ancestor_names(j: int) -> set[str]:
        names = set()
        while j >= 0:
            names.add(ops[j]["name"])
            j = parent[j]
        return names

    self_cpu: dict[str, float] = defaultdict(float)
    total_cpu: dict[str, float] = defaultdict(float)
    for i, o in enumerate(ops):
        self_cpu[o["name"]] += o["dur"]
        if o["name"] not in ancestor_names(parent[i]):
            total_cpu[o["name"]] += o["dur"]
        if parent[i] >= 0:
            self_cpu[ops[parent[i]]["name"]] -= o["dur"]
    calls = {corr(c): c for c in events(trace, LAUNCH_CATS) if c["cat"] != "cuda_driver"}
    for c in events(trace, {"cuda_driver"}):
        calls.setdefault(corr(c), c)
    self_dev: dict[str, float] = defaultdict(float)
    total_dev: dict[str, float] = defaultdict(float)
    for g in events(trace, GPU_CATS):
        c = calls.get(corr(g))
        j = innermost((c["pid"], c["tid"]), c["ts"], c["ts"]) if c else -1
        if j >= 0:
            self_dev[ops[j]["name"]] += g["dur"]
        for name in ancestor_names(j):
            total_dev[name] += g["dur"]
    return self_cpu, self_dev, total_dev, total_cpu


@pytest.mark.parametrize("stem", ["h100_bert_small_infer", "mi250_toy_train_rocm"])
def test_operator_table_matches_raw_json(stem: str, corpus: Any, raw: Any) -> None:
    s = analyze_operators(corpus(stem), EVERYTHING, top_n=1000)
    self_cpu, self_dev, total_dev, total_cpu = _brute(raw(stem))
    got_cpu = {r.name: r.self_cpu_ms for r in s.top_by_self_cpu}
    assert got_cpu == pytest.approx({n: v / 1e3 for n, v in self_cpu.items() if v > 0})
    got_dev = {r.name: r.self_device_ms for r in s.top_by_self_device}
    assert got_dev == pytest.approx({n: v / 1e3 for n, v in self_dev.items() if v > 0})
    for r in s.top_by_self_cpu:
        assert r.total_device_ms == pytest.approx(total_dev.get(r.name, 0.0) / 1e3)
        assert r.total_cpu_ms == pytest.approx(total_cpu[r.name] / 1e3)


def test_nested_calls_of_one_name_count_once() -> None:
    t = make_table(
        [
            op("aten::copy_", 0, 100),
            op("aten::copy_", 10, 50),  # inside the first: its time is in the outer call's
            op("aten::to", 20, 10),
            op("aten::copy_", 22, 5),  # two levels down, under another name
            launch(23, 1, corr=1),
            kernel("k", 30, 4, corr=1),
        ]
    )
    r = {r.name: r for r in analyze_operators(t, steps_of((0, 300))).top_by_self_cpu}
    c = r["aten::copy_"]
    assert (c.calls, c.total_cpu_ms, c.self_cpu_ms) == pytest.approx((3, 0.100, 0.095))
    assert (c.total_device_ms, c.self_device_ms, c.mean_cpu_us) == pytest.approx(
        (0.004,) * 2 + (100,)
    )
    assert r["aten::to"].total_cpu_ms == pytest.approx(0.010)


def test_no_operator_outlasts_the_step_on_a_nested_trace(corpus: Any) -> None:
    # sglang decode on MI300X: aten::copy_ calls nest; counted twice they came to 926 ms of CPU
    # in a 474 ms step
    table = corpus("mi300x_sglang_qwen3_8b_decode")
    steps = find_steps(table)
    window_ms = (steps.window[1] - steps.window[0]) / 1e3
    s = analyze_operators(table, steps, top_n=1000)
    copy = next(r for r in s.top_by_self_cpu if r.name == "aten::copy_")
    assert copy.total_cpu_ms <= window_ms
    assert max(r.total_cpu_ms for r in s.top_by_self_cpu) <= window_ms


def test_step_markers_are_not_operators(corpus: Any) -> None:
    table = corpus("v100_resnet50_train_workers0")
    s = analyze_operators(table, find_steps(table), top_n=1000)
    names = {r.name for r in (*s.top_by_self_cpu, *s.top_by_self_device)}
    assert not any(n.startswith("ProfilerStep#") for n in names)
    assert "aten::cudnn_convolution" in names


def test_convnet_device_time_sits_in_convolution_ops(corpus: Any) -> None:
    table = corpus("v100_resnet50_train_workers0")
    s = analyze_operators(table, find_steps(table), top_n=3)
    assert [r.name for r in s.top_by_self_device] == [
        "aten::cudnn_convolution_backward_weight",
        "aten::cudnn_convolution_backward_input",
        "aten::cudnn_convolution",
    ]
    assert s.attributed_device_ms == pytest.approx(s.device_ms)


def _tree(draw: Any, lo: int, hi: int, depth: int, out: list[tuple[int, int]]) -> None:
    """Draw disjoint children inside [lo, hi], recursively: a properly nested set of ranges."""
    t = lo
    while depth < 6 and t < hi and draw(st.booleans()):
        start = draw(st.integers(t, hi))
        end = draw(st.integers(start, hi))
        out.append((start, end))
        _tree(draw, start, end, depth + 1, out)
        t = end if end > start else end + 1


@st.composite
def _nested_ops(draw: Any) -> list[tuple[int, int, int]]:
    ops: list[tuple[int, int, int]] = []
    for tid in (1, 2):
        ranges: list[tuple[int, int]] = []
        _tree(draw, 0, 1000, 0, ranges)
        ops += [(tid, s, e) for s, e in ranges]
    return ops


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(_nested_ops())
def test_self_cpu_matches_brute_force_on_random_nesting(ops: list[tuple[int, int, int]]) -> None:
    events = [op(f"op{i}", s, e - s, tid=tid) for i, (tid, s, e) in enumerate(ops)]
    s = analyze_operators(make_table(events), EVERYTHING, top_n=10_000)
    got = {r.name: r.self_cpu_ms * 1e3 for r in s.top_by_self_cpu}
    expected = {}
    for i, (tid, s0, e0) in enumerate(ops):
        # direct children: contained ranges with no other range of the thread between; of two
        # equal ranges the earlier one is the parent (the loader keeps file order at equal starts)
        inside = [
            j
            for j, (t2, s2, e2) in enumerate(ops)
            if t2 == tid and s0 <= s2 and e2 <= e0 and (s2, -e2, j) > (s0, -e0, i)
        ]
        direct = [
            j
            for j in inside
            if not any(
                k != j
                and ops[k][1] <= ops[j][1]
                and ops[j][2] <= ops[k][2]
                and (ops[j][1], -ops[j][2], j) > (ops[k][1], -ops[k][2], k)
                for k in inside
            )
        ]
        self_us = (e0 - s0) - sum(ops[j][2] - ops[j][1] for j in direct)
        if self_us > 0:
            expected[f"op{i}"] = self_us
    assert got == pytest.approx(expected)


def test_totals_by_name_agree_with_the_table(corpus: Any) -> None:
    from torchdoctor.analysis.operators import total_cpu_ms_by_name

    table = corpus("mi300x_sglang_qwen3_8b_decode")
    steps = find_steps(table)
    totals = total_cpu_ms_by_name(table, steps)
    rows = analyze_operators(table, steps, top_n=10_000).top_by_self_cpu
    assert len(rows) > 10 and len(totals) >= len(rows)
    for r in rows:
        assert totals[r.name] == pytest.approx(r.total_cpu_ms), r.name
    assert not any(n.startswith("ProfilerStep#") for n in totals)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(0, 60), st.integers(0, 30)),
        min_size=1,
        max_size=40,
    )
)
def test_parent_is_the_nearest_earlier_operator_that_ends_no_earlier(
    ops: list[tuple[int, int, int]],
) -> None:
    """Any ranges, nested or overlapping, on two threads: in the walk's (thread, start,
    longest-first) order, each operator's parent is the nearest earlier one on its thread that
    ends no earlier, or none (the top-level ones are settled before the walk, the others by it)."""
    from torchdoctor.analysis.operators import _nest

    table = make_table([op(f"op{i}", s, d, tid=tid) for i, (tid, s, d) in enumerate(ops)])
    nest = _nest(table)
    thread, end = nest.thread.tolist(), nest.end.tolist()
    for i, parent in enumerate(nest.parent.tolist()):
        earlier = [j for j in range(i) if thread[j] == thread[i] and end[j] >= end[i]]
        assert parent == (earlier[-1] if earlier else -1)
