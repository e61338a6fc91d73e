"""A small conv + LSTM tagger trained on random data: most of its operator time is
convolution and recurrent math, forward and backward, among many small ops around them."""

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(6):
            layers += [nn.Conv1d(16 if i else 8, 16, 3, padding=1), nn.BatchNorm1d(16), nn.ReLU()]
        self.conv = nn.Sequential(*layers)
        self.rnn = nn.LSTM(16, 48, num_layers=2, batch_first=True)
        self.head = nn.Linear(48, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).transpose(1, 2)  # (batch, time, channels)
        out, _ = self.rnn(h)
        return self.head(out)


torch.manual_seed(0)
model = Tagger()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(16, 8, 64)
y = torch.randint(0, 5, (16, 64))
for _step in range(40):
    loss = nn.functional.cross_entropy(model(x).reshape(-1, 5), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
