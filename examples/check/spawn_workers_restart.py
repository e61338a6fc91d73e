"""Tiny epochs over a small dataset, with spawned DataLoader workers that are not persistent:
every epoch starts two new processes (each imports torch again) for two batches."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    loader = DataLoader(
        data, batch_size=32, shuffle=True, num_workers=2, multiprocessing_context="spawn"
    )
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _epoch in range(20):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
