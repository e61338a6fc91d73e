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


SCRIPTS: dict[str, Callable[[Path], Prepared]] = {
    "nanogpt": nanogpt,
    "word_language_model": word_language_model,
    "time_sequence_prediction": time_sequence_prediction,
    "mingpt_adder": mingpt_adder,
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
