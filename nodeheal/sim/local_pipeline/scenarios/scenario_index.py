"""Every scenario of the local pipeline by name, in the order ``nodeheal demo --list`` shows them:
family by family, from one fault to an outage."""

from __future__ import annotations

from nodeheal.sim.local_pipeline.scenarios.capacity import CAPACITY_SCENARIOS
from nodeheal.sim.local_pipeline.scenarios.counted import COUNTED_SCENARIOS
from nodeheal.sim.local_pipeline.scenarios.drains import DRAINS_SCENARIOS
from nodeheal.sim.local_pipeline.scenarios.event_checks import EVENT_CHECKS_SCENARIOS
from nodeheal.sim.local_pipeline.scenarios.gpu_faults import GPU_FAULTS_SCENARIOS
from nodeheal.sim.local_pipeline.scenarios.outages import OUTAGES_SCENARIOS
from nodeheal.sim.local_pipeline.scenarios.play import Scenario
from nodeheal.sim.local_pipeline.scenarios.storms import STORMS_SCENARIOS

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        *GPU_FAULTS_SCENARIOS,
        *CAPACITY_SCENARIOS,
        *COUNTED_SCENARIOS,
        *DRAINS_SCENARIOS,
        *STORMS_SCENARIOS,
        *EVENT_CHECKS_SCENARIOS,
        *OUTAGES_SCENARIOS,
    )
}
