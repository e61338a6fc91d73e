"""Code a codemod must not rewrite: each refusal names its reason and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from torchdoctor.fix.model import Refusal, Target
from torchdoctor.fix.registry import CODEMODS


def rewrite(codemod: str, source: str, **params: Any) -> Refusal:
    line = next(i for i, ln in enumerate(source.splitlines(), 1) if ln.endswith("# target"))
    result = CODEMODS[codemod].rewrite(source, Target(codemod, "/x.py", line, params))
    assert isinstance(result, Refusal), result
    return result


LOADER = {"changes": {"num_workers": "2", "persistent_workers": "True"}}

REFUSED = [
    # (codemod, source, params, reason fragment)
    (
        "dataloader-args",
        "from torch.utils.data import DataLoader\nDataLoader(ds, **cfg)  # target\n",
        LOADER,
        "built at run time",
    ),
    (
        "dataloader-args",
        "from torch.utils.data import DataLoader\nDataLoader(ds, num_workers=args.workers)  # target\n",
        LOADER,
        "num_workers is set from `args.workers`",
    ),
    (
        "dataloader-args",
        "from fastloader import DataLoader\nDataLoader(ds)  # target\n",
        LOADER,
        "fastloader.DataLoader, not torch's DataLoader",
    ),
    (
        "fused-optimizer",
        "import torch\nopt = torch.optim.Adam(ps, fused=cfg.fused)  # target\n",
        {"class": "Adam", "impl": "fused"},
        "fused is set from `cfg.fused`",
    ),
    (
        "compile-model",
        "import torch\nm = torch.compile(model, mode=MODE)  # target\n",
        {"mode": "reduce-overhead"},
        "mode is set from `MODE`",
    ),
    (
        "sync-every-n",
        "for i in range(9):\n    if loss.item() > 10:  # target\n        break\n",
        {"every": 10},
        "decides what the step does",
    ),
    (
        "sync-every-n",
        "for i in range(9):\n    value = loss.item()  # target\n    print(value)\n",
        {"every": 10},
        "kept in `value`",
    ),
    (
        "sync-every-n",
        "total = 0.0\nfor i in range(9):\n    total += loss.item()  # target\n    print(total)\n",
        {"every": 10},
        "`total` is read every step (line 4)",
    ),
    (
        "sync-every-n",
        "for x in batches:\n    print(loss.item())  # target\n",
        {"every": 10},
        "no step counter",
    ),
    ("sync-every-n", "print(x.item())  # target\n", {"every": 10}, "not inside a loop"),
    (
        "sync-every-n",
        "for i in range(9):\n    total *= loss.item()  # target\n",
        {"every": 10},
        "is not `total += x.item()`",
    ),
    (
        "anomaly-off",
        "from torch.autograd import detect_anomaly\nwith detect_anomaly():  # target\n    pass\n",
        {},
        "imported by name",
    ),
    (
        "inference-mode",
        "for x, y in loader:\n    loss = model(x)  # target\n    loss.backward()\n",
        {},
        "trains (`loss.backward()` at line 3)",
    ),
    (
        "inference-mode",
        "import torch\nwith torch.enable_grad():\n    for x in loader:\n        model(x)  # target\n",
        {},
        "enable_grad",
    ),
    (
        "bf16-autocast",
        "for x in loader:\n    (model(x) + 1).sum().backward()  # target\n",
        {},
        "not `loss.backward()`",
    ),
    (
        "bf16-autocast",
        "loss = model(x)\nfor i in range(3):\n    loss.backward()  # target\n",
        {},
        "not computed in the same block",
    ),
]

ALREADY = [
    (
        "dataloader-args",
        "from torch.utils.data import DataLoader\nDataLoader(ds, num_workers=4, persistent_workers=True)  # target\n",
        LOADER,
    ),
    (
        "fused-optimizer",
        "import torch\ntorch.optim.AdamW(ps, fused=True)  # target\n",
        {"class": "AdamW", "impl": "fused"},
    ),
    ("anomaly-off", "import torch\ntorch.autograd.set_detect_anomaly(args.debug)  # target\n", {}),
    ("anomaly-off", "import torch\ntorch.autograd.set_detect_anomaly(False)  # target\n", {}),
    (
        "inference-mode",
        "import torch\nwith torch.no_grad():\n    for x in loader:\n        model(x)  # target\n",
        {},
    ),
    (
        "bf16-autocast",
        "import torch\nfor x in loader:\n    with torch.autocast('cuda', enabled=amp):\n        loss = model(x)\n    loss.backward()  # target\n",
        {},
    ),
    ("tf32-matmul", "import torch  # target\ntorch.set_float32_matmul_precision('high')\n", {}),
]


@pytest.mark.parametrize(("codemod", "source", "params", "why"), REFUSED)
def test_refused_with_reason(codemod: str, source: str, params: dict[str, Any], why: str) -> None:
    r = rewrite(codemod, source, **params)
    assert not r.already
    assert why in r.reason


@pytest.mark.parametrize(("codemod", "source", "params"), ALREADY)
def test_already_done_is_not_rewritten(codemod: str, source: str, params: dict[str, Any]) -> None:
    assert rewrite(codemod, source, **params).already


def test_the_original_text_is_never_modified_by_a_refusal() -> None:
    source = "from torch.utils.data import DataLoader\nDataLoader(ds, **cfg)  # target\n"
    copy = str(source)
    rewrite("dataloader-args", source, **LOADER)
    assert source == copy
