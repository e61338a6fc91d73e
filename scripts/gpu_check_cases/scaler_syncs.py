"""GPU check case: fp16 autocast with a GradScaler (forced, even where bf16 runs) and one
``.item()`` per step. Under ``torchdoctor check`` the sync-debug sites must be this file's lines
(the ``.item()`` and ``scaler.step``), never torchdoctor's wrapper or torch's GradScaler, and
NVML must sample the GPU through the window (steps are made long enough for several samples).
"""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--width", type=int, default=8192)
    args = p.parse_args()
    dev = torch.device("cuda")
    model = nn.Sequential(*(nn.Linear(args.width, args.width) for _ in range(4))).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(args.width, args.width, device=dev)
    for _ in range(args.steps):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)  # GradScaler reads found_inf with .item() inside torch: sync site here
        scaler.update()
        print(f"loss {loss.item():.4f}")  # the user's own sync: sync site here


if __name__ == "__main__":
    main()
