"""Local simulation of NodeHeal's surroundings, in three parts.

- `nodeheal.sim.apiserver`: the fake Kubernetes API server (kube-apiserver's behaviour only).
- The simulated cluster and the local pipeline (`cluster`, `controllers`, `pipeline`,
  `local_aws`, `rule_targets`, `scenarios`, `timeline`): Karpenter, kubelets and workloads acting
  on that API server, and NodeHeal's AWS side in moto, for the demo, end-to-end tests and benchmarks.
- `nodeheal.sim.seeded`: the seeded, fault-injecting simulation that checks the safety invariants.
"""
