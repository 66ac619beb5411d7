"""Rule 2: fencing admits only the open response, in constant memory."""

from __future__ import annotations

import sys

from orchestrator.session.history.fencing import ResponseFence


def test_rule2_only_open_response_is_admitted() -> None:
    fence = ResponseFence()
    old = fence.issue()
    assert fence.admits(old)
    new = fence.issue()
    assert not fence.admits(old) and fence.admits(new)
    fence.close(new)
    assert not fence.admits(new)


def test_rule2_closing_an_older_response_does_not_close_the_newer() -> None:
    fence = ResponseFence()
    old = fence.issue()
    new = fence.issue()
    fence.close(old)
    assert fence.admits(new)


def test_rule2_fence_memory_does_not_grow_with_interruptions() -> None:
    fence = ResponseFence()
    before = sys.getsizeof(fence)
    for _ in range(100_000):
        fence.close(fence.issue())
    assert sys.getsizeof(fence) == before
    assert not hasattr(fence, "__dict__")
