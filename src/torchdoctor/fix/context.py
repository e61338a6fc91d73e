"""What every codemod may ask about the run: the machine it ran on, the user's files, a site."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchdoctor.fix import sources
from torchdoctor.fix.cst_tools import Parsed
from torchdoctor.record.run import RunRecord


@dataclass
class FixContext:
    """The run (``run.json``), where it ran, and a cache of the user's parsed files."""

    record: RunRecord
    """One rank's run record (an empty one when only findings are known)."""
    cwd: str
    """The working directory the run's relative sites are relative to."""
    script: str | None = None
    """Absolute path of the script that ran."""
    extra_files: list[str] = field(default_factory=list)
    _parsed: dict[str, Parsed | None] = field(default_factory=dict, repr=False)
    _text: dict[str, str] = field(default_factory=dict, repr=False)

    # -- the machine --------------------------------------------------------------------------
    @property
    def cuda(self) -> bool:
        """The run used a CUDA device (check records ``gpu`` only then)."""
        return self.record.gpu is not None

    @property
    def bf16_tensor_cores(self) -> bool:
        return self.record.gpu is not None and self.record.gpu.bf16_tensor_cores

    @property
    def tf32_capable(self) -> bool:
        return self.record.gpu is not None and self.record.gpu.tf32_capable

    @property
    def cpus(self) -> int:
        """CPUs of this rank: what check recorded with the loader, else this machine's."""
        for dl in self.record.config.dataloaders:
            n = dl.cpus_per_rank or dl.cpu_count
            if n:
                return int(n)
        from torchdoctor.capture.cpu_usage import usable_cores

        return usable_cores()

    @property
    def argv(self) -> list[str]:
        """The script's arguments in the run (after the script's name)."""
        return list(self.record.argv)

    # -- files --------------------------------------------------------------------------------
    @property
    def bases(self) -> tuple[str, ...]:
        """Where a relative site may lie: the run's working directory, the script's folder."""
        out = [self.cwd]
        if self.script:
            out.append(os.path.dirname(self.script))
        return tuple(out)

    def files(self) -> list[str]:
        """The user's files a codemod searches: the script, its own modules, sites named."""
        out: list[str] = []
        if self.script and sources.is_user_file(self.script):
            out.append(self.script)
            out += sources.local_imports(self.script)
        out += [f for f in self.extra_files if sources.is_user_file(f)]
        return list(dict.fromkeys(out))

    def add_sites_of(self, evidence: Any) -> None:
        """Search also the user files that recorded sites name (``file:line`` strings anywhere in
        a finding's evidence), beside the script's own modules."""
        stack = [evidence]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                stack += list(v.values())
            elif isinstance(v, list | tuple):
                stack += list(v)
            elif isinstance(v, str) and ":" in v and len(v) < 4096:
                found = self.site(v)
                if found and sources.is_user_file(found[0]) and found[0] not in self.extra_files:
                    self.extra_files.append(found[0])

    def site(self, site: str) -> tuple[str, int] | None:
        """``(absolute path, line)`` of a recorded ``file:line``, when the file exists."""
        parsed = sources.parse_site(site)
        if parsed is None:
            return None
        path = sources.resolve(parsed[0], self.bases)
        return (path, parsed[1]) if path else None

    def text(self, path: str) -> str:
        """The file's original text (read once: every change is made against it)."""
        if path not in self._text:
            self._text[path] = Path(path).read_text(encoding="utf-8")
        return self._text[path]

    def parsed(self, path: str) -> Parsed | None:
        """The file's original tree; None when it cannot be read or parsed."""
        if path not in self._parsed:
            try:
                self._parsed[path] = Parsed(self.text(path))
            except Exception:  # a syntax libcst does not know, an unreadable file
                self._parsed[path] = None
        return self._parsed[path]

    def rel(self, path: str) -> str:
        return sources.relative(path, self.cwd)
