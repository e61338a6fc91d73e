"""Rank-0 logging for the runtime: one logger, silent on every rank but 0."""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("torchdoctor.runtime")


class _RankZeroFilter(logging.Filter):
    """Drops records on ranks other than 0 so N processes do not print N copies."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        return self.rank == 0


def configure(rank: int) -> None:
    """Log INFO and up to stderr on rank 0, unless the application configured logging itself."""
    for f in list(logger.filters):
        if isinstance(f, _RankZeroFilter):
            logger.removeFilter(f)
    logger.addFilter(_RankZeroFilter(rank))
    # Respect an application that set up logging; otherwise make the runtime's choices visible.
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("torchdoctor: %(message)s"))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:  # keep a level the application chose
            logger.setLevel(logging.INFO)
