"""The synthesized template for each cdk context, once per process: synthesis takes seconds, and
the tests, the demo and the seeded simulation ask for the same few contexts again and again
(between processes, :mod:`nodeheal.sim.stack.template_cache` keeps them on disk)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from nodeheal.sim.stack.context import FAST_CONTEXT, deep_merge
from nodeheal.sim.stack.synthesized_app import SynthesizedApp


class TemplateCache:
    """Synthesize once per distinct cdk context (synthesis takes seconds); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._templates: dict[str, SynthesizedApp] = {}

    def get(self, context: Mapping[str, Any]) -> SynthesizedApp:
        key = json.dumps(context, sort_keys=True)
        with self._lock:
            if key not in self._templates:
                self._templates[key] = SynthesizedApp.synthesize(context)
            return self._templates[key]


TEMPLATES = TemplateCache()


def synthesized(
    overrides: Mapping[str, Any] | None = None, *, base: Mapping[str, Any] = FAST_CONTEXT
) -> SynthesizedApp:
    """The template for ``base`` with ``overrides`` merged in, from the process-wide cache."""
    return TEMPLATES.get(deep_merge(base, overrides or {}))
