"""A held-out case for grad-without-backward (written after the rule, never tuned on): a
validation score computed every step by a callback kept in a list, a nested function that closes
over the model and a validation batch and runs the forward with autograd recording, although no
backward ever reads it. ``--fixed`` runs it under ``torch.no_grad()``; ``--time`` prints the
median step and the mean CPU time of a step (after 5 warm-up steps) on standard error."""

import argparse
import sys
import time
from statistics import median

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--time", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(128, 256), nn.LayerNorm(256), nn.GELU(),
        nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU(),
        nn.Linear(256, 4),
    )  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val_x, val_y = torch.randn(256, 128), torch.randint(0, 4, (256,))
    scores: list[float] = []

    def val_accuracy() -> None:
        logits = model(val_x)  # planted: records a graph nobody backpropagates
        scores.append((logits.argmax(1) == val_y).float().mean().item())

    def val_accuracy_fixed() -> None:
        with torch.no_grad():
            logits = model(val_x)
        scores.append((logits.argmax(1) == val_y).float().mean().item())

    callbacks = [val_accuracy_fixed if args.fixed else val_accuracy]
    times, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        x, y = torch.randn(64, 128), torch.randint(0, 4, (64,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for cb in callbacks:
            cb()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if args.time:
        # the CPU time too: on a busy machine the wall time measures the other processes
        steady, steady_cpu = times[5:], cpu[5:]
        print(
            f"median_step_ms {median(steady) * 1e3:.3f} "
            f"cpu_ms_per_step {sum(steady_cpu) / len(steady_cpu) * 1e3:.3f}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
