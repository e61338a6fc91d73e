"""A loop whose time per line is known by construction: a 30 ms sleep, then a Python loop that
spins for 20 ms of wall time, then a small matmul; each part timed with perf_counter, the
times written to the JSON file named by the first argument when the script ends (or is
stopped)."""

import json
import sys
import time

import torch

import torchdoctor

SLEEP_S, SPIN_S = 0.030, 0.020
parts: dict[str, list[float]] = {"sleep": [], "spin": [], "step": []}


def spin(seconds: float) -> int:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:  # SPIN-LOOP
        n += 1
    return n


def main() -> None:
    a = torch.randn(64, 64)
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 40):
        t0 = time.perf_counter()
        time.sleep(SLEEP_S)  # SLEEP-LINE
        t1 = time.perf_counter()
        spin(SPIN_S)  # SPIN-CALL
        t2 = time.perf_counter()
        (a @ a).sum()
        parts["sleep"].append(t1 - t0)
        parts["spin"].append(t2 - t1)
        parts["step"].append(time.perf_counter() - t0)
        torchdoctor.step()


try:
    main()
finally:  # also when check stops the script after its window
    with open(sys.argv[1], "w") as f:
        json.dump(parts, f)
