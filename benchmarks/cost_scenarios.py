"""What each kind of remediation costs on AWS: state transitions and Lambda time, per execution.

Every path a fault can take runs at once in one local pipeline, one node each: replace (Xid 79),
reboot that recovers (Xid 48), reboot then a second fault within 24 h escalated to replace, a
drain a PodDisruptionBudget blocks until the drain timeout forces it, record-only (Xid 13), alert
(DCGMError), and a fault the budget refuses (maxPerHour spent by the paths before it). Each path's
ledger outcome is checked, so a count always belongs to the path it is reported for.

Waits are cdk.json's production values and the cluster's real-world delays, both divided by
:data:`SPEED`. Loop counts (drain polls, recovery checks) are ratios of two durations, so they are
the production counts as long as no scaled wait falls below the one-second floor of ASL Wait
states: the 10 s drain poll is exactly 1 s at this speed. The drain's first waits (1, 2, 4, 8 s,
adaptive polling) are 1 s here too, so a long drain counts about three rounds fewer than in
production (see docs/deploy.md).
Budgets are widened so the concurrent paths do not refuse each other, except maxPerHour, which is
exactly the number of remediations the other paths start; nothing else changes.

Transitions are counted from each execution's history (one per state entered, retries included,
as Step Functions bills them); Lambda seconds from each task's scheduled -> finished events. The
in-process Lambdas take turns (see ``nodeheal.sim.local_aws``), so a task's seconds can include
waiting for another path's task: an upper bound on what Lambda would bill.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.call_counts import CallCounter, Calls
from benchmarks.harness import production_context
from nodeheal.sim.apiserver.objects import make_pdb, make_pod
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.simulated_cluster import DCGM_ERROR, XID_13, XID_48, XID_79, Fault
from nodeheal.sim.local_pipeline.wiring import LocalPipeline, align_to_second, wait_until
from nodeheal.sim.stack.context import CLUSTER, deep_merge, demo_context
from nodeheal.sim.stack.process_templates import TEMPLATES
from nodeheal.workflow.records import Outcome

#: cdk.json waits and cluster delays divided by this (see the module docstring for why 10).
SPEED = 10.0
#: Longest path: the PDB-blocked drain waits drain.timeoutSeconds (900 s / SPEED), then forces.
TIMEOUT_SECONDS = 240.0


@dataclass(frozen=True, slots=True)
class CostPath:
    key: str
    title: str
    fault: Fault
    #: Outcome of each remediation of the node, in order (a second entry: the fault comes back).
    outcomes: tuple[Outcome, ...]


PATHS: tuple[CostPath, ...] = (
    CostPath("replace", "Xid 79 -> cordon, drain, terminate", XID_79, (Outcome.REPLACED,)),
    CostPath("reboot", "Xid 48 -> reboot, recovers, uncordon", XID_48, (Outcome.REBOOTED,)),
    CostPath(
        "escalation",
        "Xid 48 again within 24 h -> replace (2nd execution)",
        XID_48,
        (Outcome.REBOOTED, Outcome.REPLACED),
    ),
    CostPath(
        "pdb-forced",
        "Xid 79, a PDB blocks the drain until its timeout -> force, terminate",
        XID_79,
        (Outcome.REPLACED,),
    ),
    CostPath("record", "Xid 13 -> recorded, nothing touched", XID_13, (Outcome.RECORDED,)),
    CostPath("alert", "DCGMError -> alert a person, nothing touched", DCGM_ERROR, (Outcome.ALERTED,)),
    CostPath(
        "refused",
        "Xid 79 past maxPerHour -> refused by the budget, a person alerted",
        XID_79,
        (Outcome.REFUSED,),
    ),
)

#: The path the budget refuses: its fault comes after every other path's remediations have
#: started, and maxPerHour is exactly their number.
REFUSED_PATH = "refused"


def starts_before_refusal(paths: Sequence[CostPath]) -> int:
    """Remediations the other paths start within the hour (a reboot and a replace take a slot each)."""
    return sum(
        1
        for path in paths
        if path.key != REFUSED_PATH
        for outcome in path.outcomes
        if outcome in (Outcome.REPLACED, Outcome.REBOOTED)
    )


class CostPathError(RuntimeError):
    """A path did not end as it should: its counts would describe some other path."""


def _execution_figures(
    pipeline: LocalPipeline, execution_arn: str, memory_mb: Mapping[str, int]
) -> dict[str, Any]:
    """Billable transitions, and Lambda invocations / seconds / GB-seconds, of one execution."""
    history = pipeline.aws.history(execution_arn)
    transitions = sum(1 for event in history if event.get("type", "").endswith("StateEntered"))
    invocations = 0
    seconds = 0.0
    gb_seconds = 0.0
    scheduled: tuple[Any, str] | None = None
    for event in history:
        kind = event.get("type", "")
        if kind == "LambdaFunctionScheduled":
            arn = str(event["lambdaFunctionScheduledEventDetails"]["resource"])
            scheduled = (event["timestamp"], arn.rsplit(":", 1)[-1])
        elif kind in ("LambdaFunctionSucceeded", "LambdaFunctionFailed") and scheduled is not None:
            started, function = scheduled
            duration = (event["timestamp"] - started).total_seconds()
            invocations += 1
            seconds += duration
            gb_seconds += duration * memory_mb.get(function, 128) / 1024
            scheduled = None
    return {
        "transitions": transitions,
        "lambdaInvocations": invocations,
        "lambdaSeconds": seconds,
        "lambdaGbSeconds": gb_seconds,
    }


def _function_memory(pipeline: LocalPipeline) -> dict[str, int]:
    return {
        logical: int(resource.get("Properties", {}).get("MemorySize", 128))
        for logical, resource in pipeline.app.resources("AWS::Lambda::Function").items()
    }


def _prepare(pipeline: LocalPipeline, nodes: Mapping[str, str]) -> None:
    """One workload pod per node; the pdb-forced node's pod is guarded by a PDB that never allows it."""
    for key, node in nodes.items():
        labels = {"app": f"cost-{key}"}
        pipeline.store.add(
            make_pod(
                f"worker-{key}", "training", node, labels=labels, owner_kind="Job", owner_name=key, gpus=8
            )
        )
    pipeline.store.add(make_pdb("cost-pdb-forced", "training", {"app": "cost-pdb-forced"}, min_available=1))


def _escalate(pipeline: LocalPipeline, node: str, timeout: float) -> None:
    """The second fault must come after the reboot recovered and released the node."""
    pipeline.wait_for_records(1, node=node, timeout=timeout)
    wait_until(
        lambda: pipeline.ledger.lock_holder(pipeline.cluster_name, node) is None,
        timeout=timeout,
        what="the rebooted node's lock released",
    )
    align_to_second()
    pipeline.cluster.inject(node, XID_48)


def measure(
    speed: float = SPEED, timeout: float = TIMEOUT_SECONDS, only: Sequence[str] = ()
) -> dict[str, Any]:
    """Run every path (``only``: these paths alone) and return each one's counts."""
    unknown = sorted(set(only) - {path.key for path in PATHS})
    if unknown:
        raise ValueError(f"no such cost path: {', '.join(unknown)}")
    paths = tuple(path for path in PATHS if not only or path.key in only)
    starts = starts_before_refusal(paths)
    if any(path.key == REFUSED_PATH for path in paths) and starts == 0:
        raise ValueError("the refused path needs a path that starts a remediation before it")
    demo, _ = demo_context(production_context(), speed)
    context = deep_merge(
        demo,
        {
            "clusters": [CLUSTER],
            "budgets": {
                "maxInFlight": 10,
                # Widened as the others when no path is to be refused.
                "maxPerHour": starts if any(p.key == REFUSED_PATH for p in paths) else 100,
                "maxUnhealthyPoolShare": 1.0,
            },
        },
    )
    app = TEMPLATES.get(context)
    layout = ClusterLayout(gpu_nodes=len(paths), training_workers=0, notebook_gpus=0)
    started = time.monotonic()
    counter = CallCounter()
    with LocalPipeline(app, layout=layout, speed=speed) as pipeline, counter.counting(pipeline.aws):
        nodes = dict(zip((p.key for p in paths), pipeline.cluster.gpu_nodes, strict=True))
        _prepare(pipeline, nodes)
        align_to_second()
        for path in paths:
            if path.key != REFUSED_PATH:
                pipeline.cluster.inject(nodes[path.key], path.fault)
        if "escalation" in nodes:
            _escalate(pipeline, nodes["escalation"], timeout)
        records = {
            path.key: pipeline.wait_for_records(len(path.outcomes), node=nodes[path.key], timeout=timeout)
            for path in paths
            if path.key != REFUSED_PATH
        }
        # Every other remediation has started (and ended) within the hour: maxPerHour is spent.
        for refused in (path for path in paths if path.key == REFUSED_PATH):
            align_to_second()
            pipeline.cluster.inject(nodes[refused.key], refused.fault)
            records[refused.key] = pipeline.wait_for_records(
                len(refused.outcomes), node=nodes[refused.key], timeout=timeout
            )
        pipeline.wait_settled(timeout=timeout)
        arns = {e["name"]: e["executionArn"] for e in pipeline.executions()}
        memory = _function_memory(pipeline)
        results: dict[str, Any] = {}
        for path in paths:
            got = [r.outcome.value for r in records[path.key]]
            expected = [o.value for o in path.outcomes]
            if got != expected:
                raise CostPathError(f"{path.key}: outcomes {got}, expected {expected}")
            record = records[path.key][-1]  # the execution this path is about
            results[path.key] = {
                "title": path.title,
                "execution": record.execution,
                "outcome": record.outcome.value,
                **_execution_figures(pipeline, arns[record.execution], memory),
                **counter.by_execution.get(record.execution, Calls()).summary(),
                "ingest": counter.ingest_by_node.get(nodes[path.key], Calls()).summary(),
            }
    return {"speed": speed, "wallSeconds": time.monotonic() - started, "paths": results}
