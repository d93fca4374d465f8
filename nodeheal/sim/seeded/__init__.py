"""The seeded simulation: NodeHeal's safety invariants, checked after every step of many schedules.

A schedule is a seed. From it come a cluster (Karpenter pools, a managed node group, unlabelled
nodes, pods under a PodDisruptionBudget), the capacity behind each instance (on-demand, an ODCR,
a Capacity Block, spot) and whether the Karpenter pool is scarce (a stream of their own), a few
variations of the deployed settings, a plan of faults, Warning Events on the nodes (a stream of
their own, :mod:`.warning_events`: recorded through client-go's recorder model, shipped by the
exporter's attribution, counted into per-instance windows), and every choice the scheduler makes. The
workflow runs as deployed: the state machine is read from the synthesized template (:mod:`.asl`
walks it one state at a time, with its Choice rules, Retry and Catch clauses and timeout) and
every Task runs the real Lambda handler over
in-memory adapters (:mod:`.world`, :mod:`.memory_ledger`) that pass the same contract tests as the
real ones (docs/architecture.md, D7), inside a fake Lambda runtime (:mod:`.aws_fakes`).
:mod:`.schedule` interleaves executions, the cluster and the faults; inside a handler, each adapter
call is a point where other work or a fault may come first. A violation stops the schedule;
:func:`.runner.shrink` cuts its plan to the fewest faults that still break the same invariant
(delta debugging), and ``make simulate SEED=n`` replays it with the trace.

The invariants (:mod:`.invariants`), and the safety invariants of docs/architecture.md each one enforces:

=====  =======================================================================  ===============
Check  What it asserts                                                          invariant
=====  =======================================================================  ===============
I1     only the admitted Node object (UID + instance) and its own, owned          1, 2, 3
       instance are cordoned, drained, rebooted or terminated
I2     every condition that stays bad past its confirmation gets a recorded       4, 5
       decision within D5's bound (none dropped behind a lock, a stale delivery
       or a superseded holder)
I3     in flight, per hour and pool share (with its floor) hold at each cordon,   5
       for Karpenter pools, managed node groups and unlabelled nodes alike
I4     every ended execution has a ledger record; its lock and slot are freed     9
I5     two transitions never share a base name; one transition has one name       6
I6     forged, foreign, stale and future-dated events start nothing;              6
       duplicates and replays only reach their original's name
I7     a step that began in dry-run, cordon-only or paused mutates nothing        8
I8     at each destructive step the condition was still bad when the step         1, 7
       began, and no reboot where a confirmed fault of the instance's episode
       (D19) calls for replacement
I9     two executions never mutate a node at once; a superseded one never again   4
I10    nothing is force-deleted past a PDB on a node that is no longer bad        7
I11    no state exceeds 64 KiB (D17); none hits States.DataLimitExceeded          9
I12    no remediation admitted while the breaker is open; only a person closes    5
       it
I13    every fault NodeHeal saw in an episode of an instance (D19: until a reboot, 4, D19
       a replacement, or a read of the whole node healthy) reaches, within D5's
       bound, a recorded decision at least as severe as its own
I14    a drain whose node holds a pod a refuse setting protects moves no pod      7
I15    an execution whose Record outcome ran keeps that outcome, in its record    9
       and its end marker, whatever the finalizer wrote meanwhile
I16    once a person takes a node back (uncordons it, removes NodeHeal's taint), 1, 7
       no execution that admitted it before acts on it again
I17    a terminate of an instance in a Capacity Block that the decision chose     D12
       leaves the block's usable end at least launchMinutes +
       minBlockRemainingMinutes away
I18    an on-demand, unreserved instance of a scarce pool is terminated only      D12
       after its own execution rebooted it, or for a fault calling for replace
I19    every count in the window of an instance comes from an Event a recorder  D1, D10
       wrote about the Node object of that instance, with a count it wrote; an
       execution a counted crossing started acts only on that instance
I20    every stored window keeps at most MAX_SOURCES sources, the rule's count    D17
       of times per source, MAX_EVENTS_REMEMBERED Event counters, and a size
       under ``invariants.window_item_bound``
R1     a single injected transient fault (5xx, throttle, deadline, Lambda         D6
       timeout) never ends a remediation in Record failure
E1     every Kubernetes Event a step tells names its execution and the function   D8
       that wrote it, fits the API server's limits, and none fails to be built
=====  =======================================================================  ===============
"""
