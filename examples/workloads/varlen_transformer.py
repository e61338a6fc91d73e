"""A small transformer encoder classifying token sequences of varying length: each batch is padded
to its own longest sequence (lengths 8 to 48), so step times vary from batch to batch and the
collate function does real work in the loading process. Written after the search was designed,
to test it on a workload it was not tuned against.

    torchdoctor tune examples/workloads/varlen_transformer.py --budget 5m
"""

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload

VOCAB, DIM, HEADS, LAYERS, CLASSES = 500, 64, 4, 2, 4
SAMPLES, BATCH, MIN_LEN, MAX_LEN = 192, 16, 8, 48


class VarLenDataset(torch.utils.data.Dataset):
    """Deterministic token sequences of random length; the label depends on the tokens."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (SAMPLES,), generator=g)
        self.seqs = [torch.randint(1, VOCAB, (int(n),), generator=g) for n in lengths]

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int):
        seq = self.seqs[i]
        return seq, int(seq[: MIN_LEN // 2].sum()) % CLASSES


def pad_batch(items):
    """Pad to the batch's longest sequence (0 = padding) and build the padding mask."""
    longest = max(len(seq) for seq, _ in items)
    tokens = torch.zeros(len(items), longest, dtype=torch.long)
    for row, (seq, _) in enumerate(items):
        tokens[row, : len(seq)] = seq
    labels = torch.tensor([label for _, label in items])
    return tokens, tokens == 0, labels


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=0)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, 2 * DIM, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, tokens, pad_mask):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))  # mean over real tokens


@td.workload
def build(config):
    model = Classifier()
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        dataset=VarLenDataset(),
        loss=lambda model, batch: nn.functional.cross_entropy(model(batch[0], batch[1]), batch[2]),
        batch_size=BATCH,
        collate_fn=pad_batch,
    )
