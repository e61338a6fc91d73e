"""A small MLP trained with 4 intra-op threads: on a machine (or a cpuset) with fewer free
cores than that, every parallel operator waits for threads that have no core."""

import torch

torch.set_num_threads(4)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(128, 256),
    torch.nn.ReLU(),
    torch.nn.Linear(256, 256),
    torch.nn.ReLU(),
    torch.nn.Linear(256, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
for _ in range(30):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
