"""The one decision on interleaved rounds (``torchdoctor.ab``), shared by tune, fix --prove and
compare --rerun, and the one break-even."""

from __future__ import annotations

import random

import pytest

from torchdoctor import ab, stats

REF = [0.100, 0.300, 0.150, 0.250, 0.120, 0.200]  # the load moves 3x between rounds


def test_compare_wins_drops_or_waits() -> None:
    win = ab.compare(REF, [r / 1.3 for r in REF], 0.02)
    assert win.decision == "win" and win.interval.ratio == pytest.approx(1.3)
    drop = ab.compare(REF, [r * 0.995 for r in REF], 0.02)  # 0.5% faster: below the gain
    assert drop.decision == "drop"
    wobble = [1.0 / 1.02, 1.0 / 1.06, 1.0 / 0.99, 1.0 / 1.03, 1.0 / 1.01, 1.0 / 1.05]
    assert ab.compare([1.0] * 6, wobble, 0.02).decision == "undecided"
    assert ab.compare(REF[:5], REF[:5], 0.02).decision == "undecided"  # < 6 rounds
    burst = [r / 1.3 for r in REF] + [0.1 / 1.3] * 5 + [1.0]  # one round's candidate window hit
    got = ab.compare([*REF, *[0.1] * 6], burst, 0.02)
    assert got.outliers == 1 and got.decision == "win"


def test_rounds_beyond_the_shorter_arm_are_left_out() -> None:
    assert ab.ratios([2.0, 3.0, 9.0], [1.0, 1.5]) == [2.0, 2.0]
    assert ab.interval([*REF, 5.0], REF).n == len(REF)


def test_too_few_rounds_give_no_interval_and_no_decision() -> None:
    n = ab.FEWEST_ROUNDS
    fewer = ab.interval(REF[: n - 1], [r / 2 for r in REF[: n - 1]])  # 2x faster every round
    assert not ab.has_interval(fewer) and ab.decision(fewer, 0.0) == "undecided"
    enough = ab.interval(REF[:n], [r / 2 for r in REF[:n]])
    assert ab.has_interval(enough) and ab.decision(enough, 0.0) == "win"
    assert n == 6  # 2/2**6 = 3% is the first two-sided p-value under 5%


def test_a_gain_of_zero_asks_faster_or_slower_at_all() -> None:
    slower = stats.RatioInterval(0.9, 0.85, 0.95, 0.95, 8, "rank")
    assert ab.decision(slower, 0.0) == "drop"
    assert ab.decision(stats.RatioInterval(1.01, 1.005, 1.015, 0.95, 8, "rank"), 0.0) == "win"
    # the same interval does not clear a 2% gain, and cannot reach it
    assert ab.decision(stats.RatioInterval(1.01, 1.005, 1.015, 0.95, 8, "rank"), 0.02) == "drop"


def test_break_even_steps() -> None:
    # 12 s of compile for 10 ms saved per step: level after 1200 steps (not 1201 by rounding)
    assert ab.break_even_steps(12.0, 0.010, whole=True) == 1200
    assert ab.break_even_steps(12.0, 0.010) == pytest.approx(1200.0)
    # NEW pays 10 s more up front and saves 1 ms a step: level after 10 000 steps
    assert ab.break_even_steps(10.0, 0.001, whole=True) == 10_000
    # cheaper up front and dearer per step: ahead until they cross
    assert ab.break_even_steps(-6.0, -0.002) == pytest.approx(3000.0)
    assert ab.break_even_steps(10.0, -0.001) is None  # behind at every N
    assert ab.break_even_steps(10.0, 0.0) is None  # no saving repays a cost
    assert ab.break_even_steps(0.0, 0.0) is None  # level at every N
    assert ab.break_even_steps(0.0, 0.010, whole=True) == 0  # ahead from the start
    assert ab.break_even_steps(-1.0, 0.010) == 0.0  # ahead from the start


def test_round_order_mirrors_each_shuffled_round() -> None:
    rng, order, orders = random.Random(0), [], []
    for rnd in range(8):
        order = ab.round_order(["a", "b", "c"], rnd, rng, order)
        orders.append(order)
    assert all(sorted(o) == ["a", "b", "c"] for o in orders)
    assert all(orders[i + 1] == orders[i][::-1] for i in range(0, 8, 2))
    assert len({tuple(o) for o in orders[::2]}) > 1  # even rounds are drawn, not repeated
    for seed in range(5):  # two arms: each first equally often, whatever the draws
        rng, pair, firsts = random.Random(seed), [], []
        for rnd in range(8):
            pair = ab.round_order(["A", "B"], rnd, rng, pair)
            firsts.append(pair[0])
        assert firsts.count("A") == 4


def test_round_order_skips_an_arm_that_left_and_puts_a_new_one_last() -> None:
    rng = random.Random(1)
    assert ab.round_order(["b", "c"], 1, rng, ["a", "b", "c"]) == ["c", "b"]
    assert ab.round_order(["a", "b", "d"], 3, rng, ["b", "a"]) == ["a", "b", "d"]
