"""Read CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``) and explain them.

Nothing here imports torch: a snapshot is read as plain data by a restricted unpickler.
"""
