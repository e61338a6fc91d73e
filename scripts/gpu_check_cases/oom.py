"""GPU check case: an out-of-memory error after the profiled window has started.

A few GiB are held at known lines, then one allocation asks for twice the device's memory (it
fails at once, without filling the GPU). ``--catch``: the script catches the OOM and goes on, as
a batch-size search does; torchdoctor's OOM observer must still leave the snapshot.
"""

import argparse

import torch
from torch import nn


def hold_activations(dev: torch.device) -> list[torch.Tensor]:
    return [torch.empty(2**30, dtype=torch.uint8, device=dev) for _ in range(3)]  # 3 x 1 GiB


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--oom-at", type=int, default=4)
    p.add_argument("--catch", action="store_true")
    args = p.parse_args()
    dev = torch.device("cuda")
    total = torch.cuda.get_device_properties(dev).total_memory
    model = nn.Linear(1024, 1024).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    held: list[torch.Tensor] = []
    for step in range(args.steps):
        model(torch.randn(256, 1024, device=dev)).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == args.oom_at:
            held = hold_activations(dev)
            try:
                too_big = torch.empty(2 * total, dtype=torch.uint8, device=dev)
                del too_big
            except torch.cuda.OutOfMemoryError:
                if not args.catch:
                    raise
                print("caught the OOM; going on")
    del held


if __name__ == "__main__":
    main()
