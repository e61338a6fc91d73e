"""While dynamo compiles on the training thread, the samplers read the stack the thread held at
the compilation's start and never walk its frames (a walk during a compile crashed CPython
3.11.7 in f_back)."""

from __future__ import annotations

import threading

import pytest

from torchdoctor.capture import thread_stack
from torchdoctor.capture.thread_stack import hold_own_stack, raw_stack, release_own_stack


def _names(stack: thread_stack.RawStack | None) -> list[str]:
    return [code.co_name for code, _ in stack or []]


def test_a_held_stack_is_read_instead_of_walked() -> None:
    held, go_on, done = threading.Event(), threading.Event(), threading.Event()

    def compiling() -> None:
        hold_own_stack()
        hold_own_stack()  # nested: the first one is kept
        held.set()
        go_on.wait(5)
        inner_work()
        release_own_stack()
        done.wait(5)
        release_own_stack()

    def inner_work() -> None:
        # the thread moved on; a walk would see this frame, the held stack does not
        assert "inner_work" not in _names(raw_stack(threading.get_ident()))
        done.set()

    t = threading.Thread(target=compiling)
    t.start()
    held.wait(5)
    assert _names(raw_stack(t.ident))[0] == "compiling"
    go_on.set()
    t.join(5)
    assert t.ident not in thread_stack._held


def test_the_dynamo_callbacks_hold_and_release_the_stack() -> None:
    pytest.importorskip("torch")
    import torch
    import torch._dynamo

    from torchdoctor.capture.dynamo_aside import DynamoAside

    aside = DynamoAside([])
    seen: list[bool] = []

    original = aside._start

    def start(args: object) -> None:
        original(args)
        seen.append(threading.get_ident() in thread_stack._held)

    aside._start = start  # type: ignore[method-assign]
    try:
        torch._dynamo.reset()
        aside.ensure_registered()
        torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(3))
    finally:
        aside.uninstall()
    assert seen and all(seen)  # held during the compilation
    assert threading.get_ident() not in thread_stack._held  # released after it
