"""Scenarios of the local pipeline: a stimulus, and the outcome that must follow.

``nodeheal demo --scenario NAME`` plays one and exits non-zero when its expectations fail; the
end-to-end tests play the same ones and add their own assertions. Each scenario:

* ``play`` injects faults (or events) the way the real world would and waits for the pipeline to
  react; :meth:`Scenario.run <nodeheal.sim.local_pipeline.scenarios.play.Scenario.run>` then waits
  until nothing is in flight;
* ``check`` compares the final cluster, EC2, ledger and execution state with what must be true,
  adding one readable problem per mismatch.

- the `play` module: how a scenario is played, the run it acts on, and the scenario itself;
- one module per family: `gpu_faults`, `drains`, `storms`, `event_checks`, `outages`;
- the `scenario_index` module: every scenario by name
  (:data:`~nodeheal.sim.local_pipeline.scenarios.scenario_index.SCENARIOS`).
"""
