"""The simulated EKS GPU cluster: the parts of the cluster NodeHeal relies on but does not own,
acting on the fake API server's store.

- `simulated_cluster`: :class:`~nodeheal.sim.cluster.simulated_cluster.SimulatedCluster`, which
  builds the cluster and injects faults as the detectors report them;
- `controllers`: Karpenter, the kubelet after a reboot, and the workload controllers with the
  scheduler;
- `layout`: what the cluster is made of, its real-world durations and the clock of its delayed
  actions;
- `names`: the names it hands out, distinct and reproducible;
- `workload`: what its controllers and builders agree on about workloads.

How the detectors write a condition (`nodeheal.sim.detectors`) stays outside: the fake API server
writes through it too, and this package imports the fake API server.
"""
