"""The whole NodeHeal pipeline on one machine, for the demo, the end-to-end tests and benchmarks.

- `wiring`: :class:`~nodeheal.sim.local_pipeline.wiring.LocalPipeline`, the fake API server, the
  simulated cluster, the moto stack, the rule targets and the real exporter wired together, and
  the waits that follow what they do;
- `scenarios`: stimuli played through it and the outcomes that must follow (``nodeheal demo``).
"""
