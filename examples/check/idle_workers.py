"""Four DataLoader workers serving items that cost microseconds (rows of an in-memory tensor)
to a small model, on a machine with fewer cores than workers: the workers sit idle and compete
with the training process for the cores."""

import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self) -> None:
        self.x = torch.randn(4096, 64)
        self.y = torch.randint(0, 8, (4096,))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def main() -> None:
    torch.manual_seed(0)
    loader = DataLoader(Rows(), batch_size=32, shuffle=True, num_workers=4)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
