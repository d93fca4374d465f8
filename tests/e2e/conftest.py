"""End-to-end scenarios: each test plays one scenario through the whole local pipeline.

Templates come from the process-wide cache in :mod:`nodeheal.sim.stack.process_templates`, shared with the
workflow tests (same base context), so a configuration is synthesized once per session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from nodeheal.sim.local_pipeline.scenarios.play import ScenarioRun
from nodeheal.sim.local_pipeline.scenarios.scenario_index import SCENARIOS
from nodeheal.sim.local_pipeline.wiring import LocalPipeline
from nodeheal.sim.stack.process_templates import synthesized


@pytest.fixture
def play() -> Iterator[Callable[[str], ScenarioRun]]:
    """``play(name)`` runs the scenario and returns its run; the pipeline stays up for assertions."""
    with contextlib.ExitStack() as stack:

        def run(name: str) -> ScenarioRun:
            scenario = SCENARIOS[name]
            pipeline = stack.enter_context(
                LocalPipeline(synthesized(scenario.context), layout=scenario.layout)
            )
            return scenario.run(pipeline)

        yield run
