"""A ~1 GB CUDA memory snapshot: torchdoctor's streaming reader vs torch.cuda._memory_viz.

    python benchmarks/bench_memory_snapshot.py [--size-gb 1.0] [--rounds 2] [--file PATH]
        [--baseline-src DIR] [--no-torch]

Builds the file (unless --file names one) by repeating the history of the real snapshot in
../shared/snapshots (or $TORCHDOCTOR_SNAPSHOTS): each copy later in time, fresh entry dicts and
fresh frames lists over the same frame dicts, written the way ``pickle.dump`` writes (memoized
strings and frames), one entry at a time so the builder never holds the history. Then runs, as
separate processes, alternating in a shuffled order each round: ``torchdoctor memory FILE --json``
(streams: the file is over 64 MiB) and ``python -m torch.cuda._memory_viz stats FILE`` (torch's
own reader: ``pickle.load`` of the whole file, then segment statistics), under an address-space
limit so that a reader that outgrows the machine fails instead of taking it down.

``--baseline-src DIR`` adds an arm: the same ``torchdoctor memory`` on an older ``src/`` folder
(``git archive COMMIT src | tar -x -C /tmp/base``), in the same shuffled rounds, with the per-round
ratio baseline / torchdoctor. Both ``src/`` folders run from bytecode-compiled temporary copies.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_common import (
    Series,
    compile_bytecode,
    environment,
    fmt,
    print_table,
    run_child,
    torchdoctor_cmd,
)
from tests.memory.snapshot_writer import SnapshotWriter

from torchdoctor.memory.safe_pickle import load_restricted

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(os.environ.get("TORCHDOCTOR_SNAPSHOTS", REPO.parent / "shared" / "snapshots"))
SOURCE = SNAPSHOTS / "gpt_lm_train_step.pickle"


def _template(w: SnapshotWriter, entries: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """One copy of the history as one MARK...APPENDS batch, and where its time_us payloads are.

    After the first copy every string and frame is memoized, so every later copy has the same
    bytes but for the timestamps (LONG1, 7 bytes for microseconds since the epoch).
    """
    out, buf = w.out, io.BytesIO()
    w.out, w.time_offsets = buf, []
    buf.write(b"(")
    for e in entries:
        w.value(e, share=False)
    buf.write(b"e")
    w.out, offsets = out, np.array(w.time_offsets, dtype=np.int64)
    w.time_offsets = None
    data = np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()
    assert (data[offsets] == 0x8A).all() and (data[offsets + 1] == 7).all()
    return data, offsets + 2


def build(path: Path, size_bytes: int) -> tuple[int, float]:
    """Write the big snapshot, one copy of the history at a time; returns (entries, seconds)."""
    top = load_restricted(SOURCE)
    entries = top["device_traces"][0]
    times = np.array([e["time_us"] for e in entries], dtype=np.int64)
    span = int(times[-1] - times[0] + 1)
    start = time.perf_counter()
    with path.open("wb") as out:
        w = SnapshotWriter(out)
        out.write(b"\x80\x04}")
        w._memoize(None)
        out.write(b"(")
        for key, value in top.items():
            if key != "device_traces":
                w.value(key)
                w.value(value)
        w.value("device_traces")
        out.write(b"]")
        w._memoize(None)
        out.write(b"(]")
        w._memoize(None)
        w.items(entries, share=False)  # copy 0 memoizes every string and frame
        data, where = _template(w, entries)
        copies = 1
        while out.tell() + len(data) < size_bytes:
            stamp = (times + copies * span).astype("<i8").view(np.uint8).reshape(-1, 8)[:, :7]
            data[where[:, None] + np.arange(7)] = stamp
            out.write(data.tobytes())
            copies += 1
        out.write(b"eu.")
    return copies * len(entries), time.perf_counter() - start


def _limit(gib: float) -> None:
    cap = int(gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--file", type=Path, default=None, help="use this snapshot instead of building one"
    )
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--mem-gb", type=float, default=16.0, help="address-space limit per reader")
    parser.add_argument("--baseline-src", type=Path, default=None, help="an older src/ folder")
    parser.add_argument("--no-torch", action="store_true", help="leave out torch's reader")
    args = parser.parse_args()
    base = args.baseline_src.resolve() if args.baseline_src else None
    print(compile_bytecode(*([base] if base else [])))
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or Path(tmp) / "big_snapshot.pickle"
        if args.file is None:
            entries, secs = build(path, int(args.size_gb * (1 << 30)))
            print(
                f"built {path.stat().st_size / (1 << 30):.2f} GiB, {entries} history entries, in {secs:.0f} s"
            )
        arms = {"torchdoctor memory --json": [*torchdoctor_cmd(), "memory", str(path), "--json"]}
        if not args.no_torch:
            arms["torch.cuda._memory_viz stats"] = [
                sys.executable,
                "-m",
                "torch.cuda._memory_viz",
                "stats",
                str(path),
            ]
        if base is not None:
            arms["baseline memory --json"] = [*torchdoctor_cmd(base), "memory", str(path), "--json"]
        results = {name: Series() for name in arms}
        for _ in range(args.rounds):
            order = list(arms)
            random.shuffle(order)
            for name in order:
                run = run_child(arms[name], args.timeout, lambda: _limit(args.mem_gb))
                results[name].runs.append(run)
                print(
                    f"  {name}: {run.wall_s:.1f} s, {run.peak_mib:.0f} MiB, exit {run.status}",
                    flush=True,
                )
        rows = [
            [
                name,
                fmt(s.median_wall(), ".1f"),
                s.spread(),
                fmt(s.median_cpu(), ".1f"),
                fmt(s.median_peak(), ".0f"),
                s.failure() or "ok",
            ]
            for name, s in results.items()
        ]
        print(environment())
        print_table(
            ["reader", "wall s (median)", "min-max", "CPU s", "peak RSS MiB", "status"], rows
        )
        td = results["torchdoctor memory --json"]
        if "baseline memory --json" in results:
            b = results["baseline memory --json"]
            walls = sorted(
                x.wall_s / y.wall_s for x, y in zip(b.runs, td.runs, strict=True) if y.wall_s
            )
            cpus = sorted(
                x.cpu_s / y.cpu_s for x, y in zip(b.runs, td.runs, strict=True) if y.cpu_s
            )
            print(
                f"baseline / torchdoctor per round: wall {', '.join(f'{w:.2f}' for w in walls)}; "
                f"CPU {', '.join(f'{c:.2f}' for c in cpus)}"
            )
        if "torch.cuda._memory_viz stats" in results:
            viz = results["torch.cuda._memory_viz stats"]
            peak_ratio = (viz.median_peak() or 0) / (td.median_peak() or 1)
            print(
                f"peak RSS: torchdoctor {fmt(td.median_peak(), '.0f')} MiB vs _memory_viz "
                f"{fmt(viz.median_peak(), '.0f')} MiB ({peak_ratio:.1f}x less); wall "
                f"{fmt(td.median_wall(), '.1f')} s vs {fmt(viz.median_wall(), '.1f')} s"
            )


if __name__ == "__main__":
    main()
