"""``torchdoctor fix``: from a finding to a verified patch of the user's own script.

The work flows one way, a module per step:

- ``model.py``: the data (a finding as fix reads it, a codemod's target, a change);
- ``sources.py``: which files are the user's (never library code) and where a site points;
- ``cst_tools.py``: the libcst helpers every codemod shares (find a call, set an argument
  keeping the user's formatting, wrap or insert statements);
- ``codemods/``: one module per remedy, each ``plan`` (where, from the finding's evidence) and
  ``rewrite`` (the concrete syntax tree edit, or a refusal with its reason);
- ``registry.py``: codemod id -> codemod, and finding id -> codemod ids (read from the finding
  registry's ``codemods`` field);
- ``planner.py``: findings + ``run.json`` + the user's files -> changes, composed per file;
- ``diff.py``: unified diffs, and ``--write`` with the original kept beside the file;
- ``prove.py``: the original against each change and all of them, interleaved in fresh
  processes (``ab``'s engine; the child is ``capture/script_arm.py``), with the fidelity gate on
  the first losses;
- ``render.py`` / ``html.py``: text, JSON and the HTML page; ``cli.py``: the command.

Nothing here imports torch at module level except the check of an optimizer's real signature
(``codemods/optimizer.py``, when it runs).
"""
