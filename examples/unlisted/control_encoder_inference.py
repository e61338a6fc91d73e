"""Healthy control: a 4-layer transformer encoder embedding batches of sequences under
torch.inference_mode(), on PyTorch's fused fast path (nn.TransformerEncoder in eval mode,
batch_first: each layer is one aten::_transformer_encoder_layer_fwd call). Its FLOPs are inside
that fused operator; counted as zero, check once called this step 1% of the roofline."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true", help="no effect: nothing to fix")
    args = p.parse_args()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True, dropout=0.1)
    model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    data = torch.randn(8, 32, 64, 256)
    pooled = []
    with torch.inference_mode():
        for step in range(args.steps):
            pooled.append(model(data[step % 8]).mean(1))
            _ab.tick()
    print(f"embedded {sum(len(p) for p in pooled)} sequences")


if __name__ == "__main__":
    main()
