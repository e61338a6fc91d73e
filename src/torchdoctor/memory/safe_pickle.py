"""Load a snapshot pickle without running code: only containers and scalars, never a global.

``pickle.load`` imports and calls whatever a file names (``os.system`` included). A memory snapshot
holds only dicts, lists, tuples, strings, numbers and booleans, so :class:`RestrictedUnpickler`
refuses every global: a hostile file stops at its first ``GLOBAL`` opcode, before anything runs.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, NoReturn

from torchdoctor.memory.errors import SnapshotError


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds plain containers and scalars and refuses every global."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise SnapshotError(
            f"refusing to load: the file names the Python object {module}.{name}; a memory "
            "snapshot holds only plain data (this file may be hostile)"
        )

    def persistent_load(self, pid: Any) -> NoReturn:
        raise SnapshotError(
            "refusing to load: the file uses persistent ids (not a memory snapshot)"
        )


def check_header(path: Path, head: bytes) -> None:
    """Reject empty and non-pickle files before any unpickling starts."""
    if not head:
        raise SnapshotError(f"{path}: the file is empty")
    if head[0] != 0x80:  # every pickle since protocol 2 starts with PROTO
        raise SnapshotError(
            f"{path}: not a pickle (a memory snapshot is written by "
            "torch.cuda.memory._dump_snapshot())"
        )


def load_restricted(path: Path) -> Any:
    """Unpickle a whole file with :class:`RestrictedUnpickler`; every failure is a SnapshotError."""
    data = path.read_bytes()
    check_header(path, data[:1])
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except EOFError:
        raise SnapshotError(f"{path}: the file is truncated (the pickle ends early)") from None
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError) as exc:
        if "truncated" in str(exc):
            raise SnapshotError(f"{path}: the file is truncated (the pickle ends early)") from None
        raise SnapshotError(f"{path}: not a readable pickle ({exc})") from None
    except RecursionError:
        raise SnapshotError(f"{path}: the pickle nests too deeply") from None
