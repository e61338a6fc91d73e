"""A GPT-shaped training loop for the GPU check's probe-effect section (no download, random ids):
``--shape gpt2`` is GPT-2 small (12 layers x 768, 12 x 1024 tokens), ``--shape char`` the
small character model (6 x 384, 64 x 256), both in bf16 autocast with fused AdamW, eager.

It times itself as the plain reference: blocks of 5 steps between two synchronisations, and
prints ``BENCH_RESULT {"step_ms": median per-step time of the blocks after the first}``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

SHAPES = {  # layers, width, heads, batch, tokens, vocab
    "gpt2": (12, 768, 12, 12, 1024, 50304),
    "char": (6, 384, 6, 64, 256, 65),
}


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, tokens: int, vocab: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(tokens, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpt2")
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    layers, d, heads, batch, tokens, vocab = SHAPES[args.shape]
    torch.manual_seed(0)
    model = GPT(layers, d, heads, tokens, vocab).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    idx = torch.randint(vocab, (batch, tokens), device="cuda")
    targets = torch.randint(vocab, (batch, tokens), device="cuda")
    blocks: list[float] = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 5 == 0:
            torch.cuda.synchronize()
            now = time.perf_counter()
            blocks.append((now - t0) / 5 * 1e3)
            t0 = now
    steady = sorted(blocks[1:]) or blocks
    print("BENCH_RESULT " + json.dumps({"step_ms": steady[len(steady) // 2], "blocks": blocks}))


if __name__ == "__main__":
    main()
