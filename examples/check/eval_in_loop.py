"""A training loop that evaluates on 100 batches every 4 steps, inside the loop (as nanoGPT does
every eval_interval iterations): those steps run many times longer than the others."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))


@torch.no_grad()
def estimate_loss() -> float:
    losses = [torch.nn.functional.cross_entropy(model(x), y) for _ in range(100)]
    return float(torch.stack(losses).mean())


for it in range(40):
    if it % 4 == 0:
        estimate_loss()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
