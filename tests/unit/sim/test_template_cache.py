"""Synthesized templates kept between runs (nodeheal.sim.stack.template_cache): a hit only for the very
same inputs, and a cache that cannot work is passed over, never an error."""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nodeheal.sim.stack import template_cache
from nodeheal.sim.stack.template_cache import CACHE_VARIABLE, cache_directory, cache_key, cached_template


class CountingSynth:
    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any]] = []

    def __call__(self, context: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append(context)
        return {"Resources": {"Bus": {"Type": "AWS::Events::EventBus", "Name": context.get("name", "")}}}


def test_the_second_ask_for_the_same_context_is_read_not_synthesized(tmp_path: Path) -> None:
    synth = CountingSynth()
    first = cached_template({"name": "a"}, synth, directory=tmp_path)
    again = cached_template({"name": "a"}, synth, directory=tmp_path)
    other = cached_template({"name": "b"}, synth, directory=tmp_path)
    assert first == again and other != first
    assert synth.calls == [{"name": "a"}, {"name": "b"}]
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_the_key_covers_the_source_the_libraries_and_the_cdks_own_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    context = {"clusters": ["training-on-eks"]}
    base = cache_key(context)
    assert cache_key({"clusters": ["other"]}) != base
    monkeypatch.setattr(template_cache, "source_digest", lambda: "edited")
    assert cache_key(context) != base
    monkeypatch.undo()
    monkeypatch.setattr(template_cache, "_versions", lambda: {"aws-cdk-lib": "9.9.9"})
    assert cache_key(context) != base
    monkeypatch.undo()
    monkeypatch.setenv("CDK_CONTEXT_JSON", json.dumps({"@aws-cdk/core:newStyleStackSynthesis": True}))
    assert cache_key(context) != base
    monkeypatch.delenv("CDK_CONTEXT_JSON")
    assert cache_key(context) == base


def test_the_source_digest_follows_every_file_synthesis_reads() -> None:
    root = Path(template_cache.__file__).resolve().parents[3]
    assert (root / "nodeheal" / "contracts").is_dir()  # the schemas the stack embeds are hashed too
    assert len(template_cache.source_digest()) == 64


def test_a_corrupt_entry_is_synthesized_again_and_replaced(tmp_path: Path) -> None:
    synth = CountingSynth()
    cached_template({"name": "a"}, synth, directory=tmp_path)
    (entry,) = tmp_path.glob("*.json")
    entry.write_text('{"Resources": ')  # a write cut short by a crash
    assert cached_template({"name": "a"}, synth, directory=tmp_path)["Resources"]
    assert len(synth.calls) == 2
    assert json.loads(entry.read_text())["Resources"]


def test_an_unwritable_cache_is_no_cache(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-directory"
    blocked.write_text("")
    synth = CountingSynth()
    for _ in range(2):
        assert cached_template({"name": "a"}, synth, directory=blocked / "templates")
    assert len(synth.calls) == 2


def test_off_turns_it_off_and_the_default_follows_xdg(tmp_path: Path) -> None:
    assert cache_directory({CACHE_VARIABLE: "off"}) is None
    assert cache_directory({CACHE_VARIABLE: str(tmp_path)}) == tmp_path
    assert cache_directory({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "nodeheal" / "templates"


def test_only_the_most_recently_used_entries_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_cache, "MAX_ENTRIES", 3)
    synth = CountingSynth()
    for name in "abcde":
        cached_template({"name": name}, synth, directory=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 3
    assert not list(tmp_path.glob(".writing-*"))


def test_a_process_that_misses_while_another_synthesizes_waits_and_reads_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers asking for one new context synthesize it once. The lock is per open file, so
    two threads stand for two processes; the second's first read misses (the first is still
    synthesizing), and it reaches for the lock before the first finishes."""
    first_synthesizing, second_at_the_lock = threading.Event(), threading.Event()
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if threading.current_thread().name == "second":
            second_at_the_lock.set()
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)

    def slow_synth(context: Mapping[str, Any]) -> Mapping[str, Any]:
        first_synthesizing.set()
        assert second_at_the_lock.wait(timeout=60), "the second never reached the lock"
        return CountingSynth()(context)

    second_synth = CountingSynth()
    results: dict[str, Mapping[str, Any]] = {}
    first = threading.Thread(
        target=lambda: results.update(first=cached_template({"name": "a"}, slow_synth, directory=tmp_path)),
        name="first",
    )
    second = threading.Thread(
        target=lambda: results.update(
            second=cached_template({"name": "a"}, second_synth, directory=tmp_path)
        ),
        name="second",
    )
    first.start()
    assert first_synthesizing.wait(timeout=60)
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    assert not first.is_alive() and not second.is_alive()
    assert second_synth.calls == []
    assert results["second"] == results["first"]
