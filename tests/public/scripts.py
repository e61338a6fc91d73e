"""The vendored public scripts: where each one's files are, the synthetic data it reads, and
the arguments that keep it small (a tiny model, a few dozen steps, the CPU).

``prepare(name, workdir)`` copies the script's files into ``workdir``, writes its data there
and returns ``(script, args, env)`` for ``torchdoctor check`` run with ``cwd=workdir``.
Used by ``tests/public/test_public_scripts.py`` and ``scripts/public_scripts_table.py``.
"""

from __future__ import annotations

import pickle
import random
import shutil
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

Prepared = tuple[str, list[str], dict[str, str]]


def _copy(src: str, workdir: Path) -> None:
    for p in (HERE / src).rglob("*.py"):
        dest = workdir / p.relative_to(HERE / src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)


def nanogpt(workdir: Path) -> Prepared:
    """nanoGPT's train.py: a 2-layer GPT on random tokens; evaluation every 5 iterations, so
    the profiled window holds an evaluation step (as a real eval_interval does)."""
    import numpy as np

    _copy("nanogpt", workdir)
    data = workdir / "data" / "synth"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 40_000), ("val", 8_000)):
        rng.integers(0, 65, n, dtype=np.uint16).tofile(data / f"{split}.bin")
    with open(data / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 65}, f)
    args = [
        "--device=cpu", "--compile=False", "--dataset=synth", "--dtype=float32",
        "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=8",
        "--max_iters=40", "--eval_interval=5", "--eval_iters=40", "--log_interval=1",
        "--dropout=0.0", "--out_dir=out", "--always_save_checkpoint=False",
        "--gradient_accumulation_steps=1",
    ]  # fmt: skip
    return "train.py", args, {}


def word_language_model(workdir: Path) -> Prepared:
    """pytorch/examples word_language_model: a 2-layer LSTM on random words; its loop updates
    the parameters by hand (no optimizer, no DataLoader)."""
    _copy("word_language_model", workdir)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(200)]
    data = workdir / "data"
    data.mkdir()
    for split, lines in (("train", 400), ("valid", 40), ("test", 40)):
        text = "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(lines))
        (data / f"{split}.txt").write_text(text + "\n")
    args = [
        "--data", "data", "--epochs", "1", "--emsize", "64", "--nhid", "64", "--bptt", "20",
        "--batch_size", "8", "--log-interval", "1000", "--save", "model.pt",
    ]  # fmt: skip
    return "main.py", args, {}


def time_sequence_prediction(workdir: Path) -> Prepared:
    """pytorch/examples time_sequence_prediction: two LSTM cells over a sine wave, LBFGS (each
    optimizer step runs up to twenty forward/backward closures over the whole sequence)."""
    import numpy as np
    import torch

    _copy("time_sequence_prediction", workdir)
    # generate_sine_wave.py's recipe, shorter (N=20 waves of L=50 points, not 100 of 1000)
    n, length, period = 20, 50, 20
    x = np.empty((n, length), "int64")
    shift = np.random.default_rng(2).integers(-4 * period, 4 * period, n).reshape(n, 1)
    x[:] = np.array(range(length)) + shift
    torch.save(np.sin(x / 1.0 / period).astype("float64"), workdir / "traindata.pt")
    # it draws each step's prediction with matplotlib, which is not installed here: a stand-in
    # whose functions do nothing (the plots are not what is measured)
    mpl = workdir / "matplotlib"
    mpl.mkdir()
    (mpl / "__init__.py").write_text("def use(*a, **k):\n    pass\n")
    (mpl / "pyplot.py").write_text(
        "def _noop(*a, **k):\n    return None\n\n\n"
        "figure = title = xlabel = ylabel = xticks = yticks = plot = savefig = close = _noop\n"
    )
    # its own torch.load reads a numpy array (torch >= 2.6 loads weights only by default)
    return "train.py", ["--steps", "6"], {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def mingpt_adder(workdir: Path) -> Prepared:
    """minGPT's adder project: gpt-nano learning 2-digit addition, with minGPT's Trainer and its
    default 4 DataLoader workers (the dataset is made in memory)."""
    _copy("mingpt_adder", workdir)
    args = ["--trainer.max_iters=40", "--trainer.batch_size=32", "--system.work_dir=out"]
    return "adder.py", args, {}


# torchvision is not installed here (nor a dependency): the pytorch/examples scripts that import
# it get a stand-in package in their folder with what they call, on synthetic images made in
# memory (MNIST's 28x28 digits, FakeData's random images), so nothing is read or downloaded.
_TORCHVISION = {
    "__init__.py": "from . import datasets, transforms, utils  # noqa: F401\n",
    "utils.py": "def save_image(*a, **k):\n    return None\n",
    "transforms.py": """import numpy as np
import torch


class Compose:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self, x):
        for t in self.ts:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, a):
        a = np.asarray(a)
        if a.ndim == 2:
            a = a[:, :, None]
        return torch.from_numpy(a.transpose(2, 0, 1).copy()).float().div(255)


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, x):
        return (x - self.mean) / self.std


class _Same:
    def __init__(self, *a, **k):
        pass

    def __call__(self, x):
        return x


Resize = CenterCrop = _Same
""",
    "datasets.py": """import numpy as np


class _Images:
    def __init__(self, n, shape, seed, transform):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        self.targets = rng.integers(0, 10, n)
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        return (self.transform(x) if self.transform else x), int(self.targets[i])


class MNIST(_Images):
    def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
        super().__init__(1280 if train else 256, (28, 28), int(train), transform)


class FakeData(_Images):
    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None,
                 target_transform=None, random_offset=0):
        c, h, w = image_size
        super().__init__(size, (h, w, c), random_offset, transform)
""",
}


def _torchvision(workdir: Path) -> None:
    pkg = workdir / "torchvision"
    pkg.mkdir()
    for name, text in _TORCHVISION.items():
        (pkg / name).write_text(text)


def mnist(workdir: Path) -> Prepared:
    """pytorch/examples mnist: a two-convolution net, Adadelta, StepLR; one epoch of 1280
    synthetic digits (20 steps of 64) and a test pass."""
    _copy("mnist", workdir)
    _torchvision(workdir)
    return "main.py", ["--epochs", "1", "--log-interval", "1000"], {}


def vae(workdir: Path) -> Prepared:
    """pytorch/examples vae: a fully connected VAE on synthetic digits, Adam; one epoch of 40
    steps of 32 and a test pass."""
    _copy("vae", workdir)
    _torchvision(workdir)
    (workdir / "results").mkdir()
    return "main.py", ["--epochs", "1", "--batch-size", "32", "--log-interval", "1000"], {}


def dcgan(workdir: Path) -> Prepared:
    """pytorch/examples dcgan on its own ``--dataset fake`` (torchvision's FakeData: 1000 random
    64x64 images), 8 filters, batch 16, one epoch (63 steps); its loader has 2 workers."""
    _copy("dcgan", workdir)
    _torchvision(workdir)
    args = [
        "--dataset", "fake", "--niter", "1", "--batchSize", "16", "--ngf", "8", "--ndf", "8",
        "--nz", "16", "--manualSeed", "1", "--outf", "out",
    ]  # fmt: skip
    return "main.py", args, {}


SCRIPTS: dict[str, Callable[[Path], Prepared]] = {
    "nanogpt": nanogpt,
    "word_language_model": word_language_model,
    "time_sequence_prediction": time_sequence_prediction,
    "mingpt_adder": mingpt_adder,
    "mnist": mnist,
    "vae": vae,
    "dcgan": dcgan,
}


# check's window per script (its --warmup/--steps): the default (5 + 5) unless the script has
# fewer steps. time_sequence_prediction's 6 LBFGS steps are each ~20 closures of the sequence.
WINDOWS: dict[str, list[str]] = {
    # six LBFGS steps of about 10^6 operators each: no room for a clean window
    "time_sequence_prediction": ["--warmup", "1", "--clean-steps", "0", "--steps", "2"]
}


def prepare(name: str, workdir: Path) -> Prepared:
    """Copy the script and write its data into ``workdir``; the script, its arguments and the
    environment variables it needs."""
    workdir.mkdir(parents=True, exist_ok=True)
    return SCRIPTS[name](workdir)
