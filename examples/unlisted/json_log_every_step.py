"""Training with a metrics log a dashboard reads. Planted: the whole history is rewritten as
one JSON document after every step (the file grows, so each write costs more). --fixed appends
one line per step (JSON Lines) and flushes every 50 steps."""

import argparse
import json
import os
import tempfile

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    p.add_argument(
        "--history", type=int, default=20000, help="entries already logged (resumed run)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(2048, 128), torch.randint(0, 10, (2048,))
    log_dir = tempfile.mkdtemp()
    history = [{"step": i, "loss": 2.3, "lr": 1e-3, "grad_norm": 1.0} for i in range(args.history)]
    lines = open(os.path.join(log_dir, "metrics.jsonl"), "a")  # noqa: SIM115 (closed below)
    for step in range(args.steps):
        idx = torch.randint(0, 2048, (128,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        entry = {"step": step, "loss": float(loss), "lr": 1e-3, "grad_norm": norm}
        if args.fixed:
            lines.write(json.dumps(entry) + "\n")
            if step % 50 == 0:
                lines.flush()
        else:
            history.append(entry)
            with open(os.path.join(log_dir, "metrics.json"), "w") as f:
                json.dump(history, f, indent=2)  # planted: the whole history, every step
        _ab.tick()
    lines.close()


if __name__ == "__main__":
    main()
