"""A validation loader built first and a training loader built second; only the training
loader's batches (3 ms of Python each) keep the measured steps waiting."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.0002)
        return torch.full((16,), float(i % 7))


val_loader = DataLoader(torch.randn(64, 16), batch_size=64)
train_loader = DataLoader(Slow(), batch_size=16, shuffle=True)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in val_loader:  # one validation pass before training
    model(x)
for x in train_loader:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
