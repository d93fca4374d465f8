"""Local simulation of NodeHeal's surroundings.

- `nodeheal.sim.apiserver`: the fake Kubernetes API server (kube-apiserver's behaviour only).
- `nodeheal.sim.cluster`: the simulated cluster acting on that API server (Karpenter, kubelets,
  workloads and their scheduler).
- `nodeheal.sim.stack`: NodeHeal's synthesized stack as the simulation reads it (the template, the
  cdk context it is synthesized with, its caches, its rule targets).
- `nodeheal.sim.local_pipeline`: the whole pipeline on one machine and its scenarios, for the
  demo, the end-to-end tests and benchmarks.
- `nodeheal.sim.seeded`: the seeded, fault-injecting simulation that checks the safety invariants.

At the root: `local_aws` (NodeHeal's AWS side in moto, built from the template), `timeline` (what
happened where, for the demo and the tests) and `detectors` (how each detector writes a Node
condition, which the fake API server and the seeded simulation both write through).
"""
