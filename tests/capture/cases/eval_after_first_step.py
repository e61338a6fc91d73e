"""A held-out case for costs paid once per job: a small regression model whose loop, like a
trainer's end-of-batch callback, scores a validation set after the first optimizer step only
(iteration 0), then trains on. The evaluation is a cost of the job, not of every step."""

import torch
from torch import nn

max_iters = 60  # the job's length, named as training scripts name it

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 1)
)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
val_x, val_y = torch.randn(600, 64), torch.randn(600, 1)


def validate() -> float:
    total = 0.0
    with torch.no_grad():
        for _ in range(150):  # batches of 128 forwards: tens of training steps' worth
            i = torch.randint(0, 600, (128,))
            total += nn.functional.mse_loss(model(val_x[i]), val_y[i]).item()
    return total / 150


for it in range(max_iters):
    x, y = torch.randn(64, 64), torch.randn(64, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it == 0:
        print(f"validation loss at iteration 0: {validate():.3f}")
