"""The run record's floor.

- ``layout.py``: the run folder's layout, every file name in one place.
- ``run.py``: ``RunRecord``, the typed, versioned view of ``run.json`` (steps, compile activity,
  settings, syncs, device) that the run rules, ``compare`` and ``fix`` read.
- ``typed.py``: the one typed read of a section from its dataclass's annotations, tolerant of
  malformed values, and its write back; ``rows.py``: the sections' rows (sync sites, graph
  breaks, recompiles, autocast uses) as frozen dataclasses.
- ``write.py``: writing ``run.json``: its header, its steps section, the torchrun rank index.
- ``folder.py``: reading a folder: JSON files checked for their schema and version, and the
  run's own record (rank 0's under torchrun), with one-line errors.

Capture writes the folder; the commands, ``compare`` and ``fix`` read it, always through these
names, never by spelling a file name of their own.
"""
