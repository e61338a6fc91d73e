"""The real snapshot fixture of the memory tests, shared with the hostile cases."""

from tests.memory.conftest import gpt_snapshot  # noqa: F401
