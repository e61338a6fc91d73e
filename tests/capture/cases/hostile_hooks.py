"""A training loop that does everything a guest's hooks must survive: its own global optimizer
post-hooks registered every step after ours (and removed a step later), module hooks that add
and remove global module hooks and call gc.collect() mid-forward, tensor hooks, and a thread
running forward passes of another model at the same time."""

import gc
import sys
import threading
import time

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import register_optimizer_step_post_hook

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(256, 32), torch.randint(0, 4, (256,))
seen = {"post": 0, "global_fwd": 0}
handles: list = []


def post_hook(optimizer, args, kwargs):
    seen["post"] += 1


def global_forward(module, args, output):
    seen["global_fwd"] += 1


def churning_hook(module, args, output):
    # add a global module hook, drop an older one, and collect garbage, all mid-forward
    handles.append(nn_module.register_module_forward_hook(global_forward))
    if len(handles) > 2:
        handles.pop(0).remove()
    gc.collect(0)


model[1].register_forward_hook(churning_hook)
other = nn.Linear(32, 32)
stop = threading.Event()


def background() -> None:
    while not stop.is_set():
        with torch.no_grad():
            other(torch.randn(8, 32))


t = threading.Thread(target=background, daemon=True)
t.start()
optimizer_handles: list = []
try:
    for _ in range(steps):
        optimizer_handles.append(register_optimizer_step_post_hook(post_hook))  # after ours
        if len(optimizer_handles) > 1:
            optimizer_handles.pop(0).remove()
        idx = torch.randint(0, 256, (64,))
        out = model(x[idx])
        out.register_hook(lambda g: g * 1.0)
        loss = nn.functional.cross_entropy(out, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.005)  # a step long enough to be sampled
finally:
    stop.set()
    t.join()
print(f"post hooks ran {seen['post']} times, global forward hooks {seen['global_fwd']}")
