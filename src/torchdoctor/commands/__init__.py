"""The commands, above every stage: each drives the stages (load, analyse, judge, render) for
one ``torchdoctor`` command and returns data; printing goes through ``report/``.

``analyze`` (a trace or a folder of ranks) and ``check`` (a script under watch) live here;
``tune``, ``compare`` and ``fix`` are command packages of their own at the same level.
"""
