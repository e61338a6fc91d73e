"""The round loop: every arm once per round, in ``ab.round_order``, until a caller's rule stops it.

An arm is anything the caller runs (a script in a fresh process for ``compare --rerun`` and
``fix --prove``, a configuration's training loop inside one trial process for ``tune``); ``run``
runs one arm once and returns what it measured. A run that ``ok`` rejects either ends the rounds
at once (``on_fail="stop"``: compare, whose two sides are both needed) or takes its arm out of
the later rounds (``"drop"``: fix, whose other changes can still be measured; the rounds end when
fewer than two arms are left). After each round ``after_round`` may name a reason to stop (the
interval decided, the time ran out).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from torchdoctor.ab import round_order

A = TypeVar("A")
R = TypeVar("R")


@dataclass
class Played(Generic[A, R]):
    """What the rounds ran."""

    orders: list[list[A]] = field(default_factory=list)
    """Each round's order."""
    runs: list[tuple[int, A, R]] = field(default_factory=list)
    """(round, arm, what it measured), in the order they ran."""
    stopped: str = "rounds"
    """``rounds`` (all ran), ``failed`` (a run failed under "stop"), ``arms`` (under "drop",
    fewer than two arms left), or the reason ``after_round`` gave."""

    def of(self, arm: A) -> list[R]:
        """One arm's runs, rounds in order."""
        return [r for _, a, r in self.runs if a == arm]


def run_rounds(
    arms: Sequence[A],
    run: Callable[[A, int], R],
    rounds: int,
    seed: int,
    *,
    ok: Callable[[R], bool] = lambda _: True,
    on_fail: Literal["stop", "drop"] = "stop",
    after_round: Callable[[int, list[tuple[A, R]]], str] | None = None,
) -> Played[A, R]:
    """Run ``rounds`` rounds of ``arms`` (0-based round numbers passed to ``run``), the order
    drawn from ``seed`` (the same seed, the same orders)."""
    shuffle = random.Random(seed)
    played: Played[A, R] = Played()
    failed: list[A] = []
    order: list[A] = []
    for rnd in range(rounds):
        live = [a for a in arms if a not in failed]
        if on_fail == "drop" and len(live) < 2:
            played.stopped = "arms"
            break
        order = round_order(live, rnd, shuffle, order)
        played.orders.append(order)
        this: list[tuple[A, R]] = []
        for arm in order:
            got = run(arm, rnd)
            this.append((arm, got))
            played.runs.append((rnd, arm, got))
            if not ok(got):
                failed.append(arm)
                if on_fail == "stop":
                    played.stopped = "failed"
                    return played
        why = after_round(rnd, this) if after_round is not None else ""
        if why:
            played.stopped = why
            break
    return played
