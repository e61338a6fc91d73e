"""Reads its learning-rate schedule with ast.literal_eval from a malformed string: the script
parses, and the SyntaxError is raised while it runs, before the first step."""

import ast

import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
schedule = ast.literal_eval("{0: 0.1, 10: 0.01")  # missing brace: SyntaxError at run time
for _step in range(20):
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
