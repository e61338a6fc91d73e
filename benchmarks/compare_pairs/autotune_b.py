"""Pair "compile cost", NEW: the same 20-step job eager (no compile), on a machine
whose compile cache starts empty (a fresh CI runner)."""

import argparse
import atexit
import os
import shutil
import tempfile

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")  # a cold cache
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)
import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(1)  # a 2-core shared machine: one thread keeps the A/B about the code
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
args = p.parse_args()
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step_model = model
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
for _ in range(args.steps):
    loss = nn.functional.cross_entropy(step_model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
