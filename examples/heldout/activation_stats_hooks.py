"""Training that logs activation norms through forward hooks; a helper attaches the hooks
every step and never keeps the handles, so each step runs every earlier step's hooks too."""

import argparse

import torch
from torch import nn

STATS: dict[str, float] = {}


def watch_activations(model: nn.Module) -> None:
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            mod.register_forward_hook(
                lambda m, i, o, name=name: STATS.__setitem__(name, float(o.detach().norm()))
            )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        *[m for _ in range(6) for m in (nn.Linear(256, 256), nn.ReLU())], nn.Linear(256, 4)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.iters):
        watch_activations(model)
        x, y = torch.randn(64, 256), torch.randint(0, 4, (64,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
