"""The run record's floor: the run folder's layout (``layout.py``, every file name in one place).

Capture writes the folder; the commands, ``compare`` and ``fix`` read it, always through these
names, never by spelling a file name of their own.
"""
