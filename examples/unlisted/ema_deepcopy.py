"""Mean-teacher training: an exponential moving average of the student is the teacher.
Planted: the teacher is rebuilt with copy.deepcopy(student) every step and then averaged.
--fixed keeps one teacher and updates it in place."""

import argparse
import copy

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    student = nn.Sequential(
        *[nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(8)], nn.Linear(512, 10)
    )
    teacher = copy.deepcopy(student).requires_grad_(False)
    opt = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(2048, 512), torch.randint(0, 10, (2048,))
    for _ in range(args.steps):
        idx = torch.randint(0, 2048, (64,))
        with torch.no_grad():
            target = teacher(x[idx]).softmax(-1)
        logits = student(x[idx])
        loss = nn.functional.cross_entropy(logits, y[idx]) + nn.functional.kl_div(
            logits.log_softmax(-1), target, reduction="batchmean"
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            if args.fixed:
                for t, s in zip(teacher.parameters(), student.parameters(), strict=True):
                    t.lerp_(s, 0.01)
            else:
                old = teacher
                teacher = copy.deepcopy(student).requires_grad_(False)  # planted
                for t, o in zip(teacher.parameters(), old.parameters(), strict=True):
                    t.lerp_(o, 0.99)
        _ab.tick()


if __name__ == "__main__":
    main()
