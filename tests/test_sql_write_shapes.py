"""Writes of every width and mix read back the same, whether the dialect says them in one
statement (PostgreSQL's chained inserts) or in a transaction of several."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint

from langgraph_checkpoint_agent_memory import SQLSaver
from langgraph_checkpoint_agent_memory.errors import ThreadDeletedError
from tests.helpers import present


def _put(saver: Any, thread: str, channels: dict[str, Any], parent: str | None = None) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = channels
    cp["channel_versions"] = {k: saver.get_next_version(None, None) for k in channels}
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    return saver.put(config, cp, {"step": 1}, cp["channel_versions"])


@pytest.mark.parametrize("n", [1, 3, 40, 75])
def test_puts_of_any_width_read_back(make_saver: Callable[..., SQLSaver], n: int) -> None:
    saver = make_saver()
    channels = {f"ch{i}": [f"value {i}"] * (i % 3 + 1) for i in range(n)}
    config = _put(saver, f"wide-{n}", channels)
    got = saver.get_tuple(config)
    assert got is not None
    assert got.checkpoint["channel_values"] == channels


def test_writes_keep_first_wins_and_replace_rules(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()  # one saver for every example: each writes under its own thread
    threads = itertools.count()
    channel = st.sampled_from(["a", "b", *WRITES_IDX_MAP])

    @settings(max_examples=40, deadline=None)
    @given(
        writes=st.lists(st.tuples(channel, st.integers(0, 9)), max_size=40),
        again=st.lists(st.tuples(channel, st.integers(10, 19)), max_size=6),
    )
    def check(writes: list[tuple[str, int]], again: list[tuple[str, int]]) -> None:
        config = _put(saver, f"w{next(threads)}", {"x": ["1"]})
        saver.put_writes(config, writes, "task-1")
        saver.put_writes(config, again, "task-1")  # a repeat: only special channels move on
        got = saver.get_tuple(config)
        assert got is not None
        expected: dict[int, tuple[str, int]] = {}
        for batch in (writes, again):
            for idx, (name, value) in enumerate(batch):
                key = WRITES_IDX_MAP.get(name, idx)
                if key not in expected or name in WRITES_IDX_MAP:
                    expected[key] = (name, value)
        stored = sorted((w[1], w[2]) for w in present(got.pending_writes) if w[0] == "task-1")
        assert stored == sorted(expected.values())

    check()


def test_a_refused_write_leaves_nothing(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    config = _put(saver, "gone", {"x": ["1"]})
    saver.delete_thread("gone")
    with pytest.raises(ThreadDeletedError):
        _put(saver, "gone", {"y": ["2"] * 3}, parent=config["configurable"]["checkpoint_id"])
    with pytest.raises(ThreadDeletedError):
        saver.put_writes(config, [("a", 1)], "t")
    assert list(saver.list({"configurable": {"thread_id": "gone"}})) == []
    fresh = _put(saver, "gone", {"z": ["3"]})  # a fresh start (no parent) is allowed
    got = saver.get_tuple(fresh)
    assert got is not None and got.checkpoint["channel_values"] == {"z": ["3"]}
    assert got.pending_writes == []
