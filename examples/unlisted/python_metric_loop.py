"""A multi-class classifier with a per-step error report: each sample's top-3 labels and
probabilities, the macro F1 and the ten most confused class pairs. Planted: all of it is
computed per sample in Python over .tolist() results. --fixed computes it with tensor
operations (topk, bincount) and keeps only the summary."""

import argparse

import _ab
import torch
from torch import nn

CLASSES = [f"class_{i}" for i in range(100)]


def report_python(probs: list[list[float]], true: list[int]) -> dict[str, object]:
    rows = []
    confusion: dict[tuple[int, int], int] = {}
    hits = [0] * 100
    counts = [0] * 100
    for i, (p, t) in enumerate(zip(probs, true, strict=True)):  # planted: per-sample Python
        top = sorted(range(len(p)), key=p.__getitem__, reverse=True)[:3]
        rows.append(
            {"sample": i, "top3": [CLASSES[j] for j in top], "p": [round(p[j], 3) for j in top]}
        )
        counts[t] += 1
        if top[0] == t:
            hits[t] += 1
        else:
            confusion[(t, top[0])] = confusion.get((t, top[0]), 0) + 1
    worst = sorted(confusion.items(), key=lambda kv: -kv[1])[:10]
    recall = sum(h / c for h, c in zip(hits, counts, strict=True) if c) / 100
    return {"rows": len(rows), "recall": recall, "confused": worst}


def report_torch(probs: torch.Tensor, true: torch.Tensor) -> dict[str, object]:
    top = probs.topk(3, dim=1).indices
    pred = top[:, 0]
    counts = torch.bincount(true, minlength=100).clamp(min=1)
    hits = torch.bincount(true[pred == true], minlength=100)
    wrong = pred != true
    pairs = torch.bincount(true[wrong] * 100 + pred[wrong], minlength=100 * 100)
    worst = pairs.topk(10)
    return {
        "rows": len(top),
        "recall": float((hits / counts).mean()),
        "confused": worst.indices.tolist(),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 100))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    reports = []
    for _ in range(args.steps):
        x, y = torch.randn(1024, 64), torch.randint(0, 100, (1024,))
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        probs = logits.detach().softmax(1)
        if args.fixed:
            reports.append(report_torch(probs, y))
        else:
            reports.append(report_python(probs.tolist(), y.tolist()))
        _ab.tick()
    print(f"last recall {reports[-1]['recall']:.3f}")


if __name__ == "__main__":
    main()
