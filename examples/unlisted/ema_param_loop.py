"""Mean-teacher training with one teacher, averaged towards the student after every step.
Planted: the average is written tensor by tensor with new temporaries (three operators and two
allocations per tensor). --fixed updates every tensor in one foreach call."""

import argparse
import copy

import _ab
import torch
from torch import nn


def update_teacher(teacher: nn.Module, student: nn.Module, decay: float = 0.99) -> None:
    with torch.no_grad():
        for t, s in zip(teacher.parameters(), student.parameters(), strict=True):
            t.copy_(decay * t + (1 - decay) * s)  # planted


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
    teacher_params, student_params = list(teacher.parameters()), list(student.parameters())
    for _ in range(args.steps):
        idx = torch.randint(0, 2048, (64,))
        loss = nn.functional.cross_entropy(student(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fixed:
            with torch.no_grad():
                torch._foreach_lerp_(teacher_params, student_params, 0.01)
        else:
            update_teacher(teacher, student)
        _ab.tick()


if __name__ == "__main__":
    main()
