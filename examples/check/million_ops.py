"""Each step is about a million tiny operators (a Python loop of scalar-sized tensor ops, as
an LBFGS closure over a long recurrent sequence is): profiling five such steps in full would
hold gigabytes of events."""

import sys

import torch

ops_per_step = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
w = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
x = torch.ones(4)
for _ in range(6):
    with torch.no_grad():
        y = x
        for _ in range(ops_per_step // 2):
            y = y + 1  # two small operators per iteration (add, and the in-place mul)
            y.mul_(0.5)
    loss = (w * y).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
