"""Synthesized templates kept on disk between runs.

Synthesizing NodeHeal's stack takes seconds (the CDK runs in a Node.js process behind jsii, nine
seconds for the first synth of a process), and the local pipeline needs the same few templates
again and again: ``nodeheal demo``, ``nodeheal simulate --seed``, ``nodeheal test-pattern --rule``
and every test worker. A template is a pure function of its inputs, so it is kept under a key that
hashes all of them:

* the cdk context (``context.nodeheal`` with the local pipeline's overrides);
* every file of NodeHeal's own source that synthesis reads (``nodeheal/`` and ``stacks/``: the
  constructs, the configuration types, the contracts the stack embeds);
* the versions of the Python and of the CDK libraries (aws-cdk-lib, constructs, jsii), and the
  context the CDK itself takes from the environment (``CDK_CONTEXT_JSON``).

An edited source file or an upgraded library is a new key, never a stale hit. The directory is
``NODEHEAL_TEMPLATE_CACHE``, else ``$XDG_CACHE_HOME/nodeheal/templates`` (``~/.cache/...``);
``NODEHEAL_TEMPLATE_CACHE=off`` turns the cache off. A cache that cannot be read or written is
passed over: the template is synthesized as if there were none. The cache keeps its most recently
used entries (:data:`MAX_ENTRIES`).

Processes that miss the same entry at once (the workers of one ``pytest -n`` run, which start on
the same few contexts) synthesize it once: the first holds a lock on the entry while it
synthesizes, and the others wait for it and then read what it wrote. A lock that cannot be taken
is passed over, as an unusable cache is.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

CACHE_VARIABLE = "NODEHEAL_TEMPLATE_CACHE"
#: Entries kept; a template is 100-200 KB.
MAX_ENTRIES = 200
#: The libraries whose versions can change what a synth writes.
SYNTH_DISTRIBUTIONS = ("aws-cdk-lib", "constructs", "jsii")
#: The source trees synthesis reads, relative to the directory holding the ``nodeheal`` package.
SOURCE_TREES = ("nodeheal", "stacks")


def cache_directory(environ: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if environ is None else environ
    named = env.get(CACHE_VARIABLE, "").strip()
    if named.lower() == "off":
        return None
    if named:
        return Path(named)
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "nodeheal" / "templates"


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 over every file of the source trees (path and content), computed once a process."""
    root = Path(__file__).resolve().parents[3]  # the checkout: nodeheal/sim/stack/template_cache.py
    digest = hashlib.sha256()
    for tree in SOURCE_TREES:
        for path in sorted((root / tree).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(b"\0")
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    found = {"python": sys.version}
    for distribution in SYNTH_DISTRIBUTIONS:
        try:
            found[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            found[distribution] = ""
    return found


def cache_key(context: Mapping[str, Any]) -> str:
    material = json.dumps(
        {
            "context": context,
            # The CDK merges this into every App's context (``cdk synth`` sets it).
            "cdkContextJson": os.environ.get("CDK_CONTEXT_JSON", ""),
            "source": source_digest(),
            "versions": _versions(),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode()).hexdigest()


def cached_template(
    context: Mapping[str, Any],
    synthesize: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    *,
    directory: Path | None = None,
) -> Mapping[str, Any]:
    """The template for ``context``: from the cache, or ``synthesize(context)`` kept there."""
    where = directory if directory is not None else cache_directory()
    if where is None:
        return synthesize(context)
    entry = where / f"{cache_key(context)}.json"
    template = _read(entry)
    if template is not None:
        return template
    with _entry_lock(where, entry):
        # Another process may have written the entry while this one waited for the lock.
        template = _read(entry)
        if template is None:
            template = synthesize(context)
            _store(where, entry, template)
    return template


def _read(entry: Path) -> Mapping[str, Any] | None:
    """The entry's template (marked most recently used), or None when it cannot be read."""
    with contextlib.suppress(OSError, ValueError):
        template: Mapping[str, Any] = json.loads(entry.read_text())
        with contextlib.suppress(OSError):
            os.utime(entry)  # most recently used
        return template
    return None


def _lock_path(entry: Path) -> Path:
    return entry.with_name(f".{entry.stem}.lock")


@contextlib.contextmanager
def _entry_lock(directory: Path, entry: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``entry`` across processes (released when its file closes)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = _lock_path(entry).open("a")
    except OSError:
        yield  # no lock where no cache can be written: synthesize as if there were none
        return
    with handle:
        with contextlib.suppress(OSError):
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _store(directory: Path, entry: Path, template: Mapping[str, Any]) -> None:
    """Write atomically (a concurrent reader sees the whole file or none), then prune."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=directory, prefix=".writing-", suffix=".json", delete=False
        ) as handle:
            json.dump(template, handle, separators=(",", ":"))
        Path(handle.name).replace(entry)
        entries = sorted(directory.glob("*.json"), key=lambda path: path.stat().st_mtime)
        for stale in entries[: max(len(entries) - MAX_ENTRIES, 0)]:
            stale.unlink(missing_ok=True)
            _lock_path(stale).unlink(missing_ok=True)
    except OSError:
        return  # a cache that cannot be written is no cache, not an error
