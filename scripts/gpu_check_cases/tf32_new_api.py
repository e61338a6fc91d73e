"""GPU check case: TF32 set through torch's new fp32_precision API (torch >= 2.9), after which
reading the legacy flags raises. ``torchdoctor check`` must still write a complete record, with
NVML samples and sync-debug sites (the window reached every probe) and tf32_matmul true."""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    if hasattr(torch.backends, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    else:  # torch < 2.9: the legacy switch
        torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    model = nn.Sequential(*(nn.Linear(8192, 8192) for _ in range(4))).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 8192, device=dev)
    for _ in range(args.steps):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loss.item() != loss.item():  # a NaN check: one sync per step
            raise SystemExit("NaN loss")


if __name__ == "__main__":
    main()
