"""The steps of the remediation state machine, each declared once. Pure data (domain).

A step is one Lambda task of the state machine. Its entry below says everything the rest of
NodeHeal needs to know about it, and the rest derives from the entry:

* the stack deploys one function per step (``nodeheal/cdk/workflow_tasks.py``) with its handler,
  description, memory, Lambda timeout, ledger, EC2 and notification grants, and the state machine
  (``nodeheal/cdk/workflow_definition.py``) names its task state and retries it by what the entry
  says (idempotent, mutating);
* ``nodeheal.worst_case`` counts the step's Lambda timeout, from its longest sequence of calls, in the
  worst case of an execution (docs/architecture.md, D5);
* ``nodeheal.rbac`` renders its Kubernetes rules into its ClusterRole (``deploy/rbac``, D8);
* ``nodeheal.workflow.step_events`` writes the step's Kubernetes Events under its name, with the
  reasons the entry declares;
* the local pipeline's timeline (``nodeheal.sim.timeline``) describes its result in the entry's
  words.

So a new step is its handler (``lambdas/``), its domain function (``nodeheal.workflow``), one
entry here and its tests; where it runs in the state machine's graph is the definition's choice.
The tests that hold the derived forms equal (the template, the RBAC manifest, the worst case)
name each step through this registry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeheal.grants import LedgerGrant, LedgerItem, PolicyRule

#: Seconds of one Kubernetes request answered just inside its timeouts: connect 5 + read 30 = 35
#: (``nodeheal.kube.client.DEFAULT_REQUEST_TIMEOUT``; a test holds the two equal).
KUBE_REQUEST_SECONDS = 35
#: Seconds of one AWS call answered on its first attempt just inside its timeouts: connect 2 + read
#: 5 = 7 (``nodeheal.runtime``'s botocore config). botocore's retries of a slow AWS are not
#: budgeted: the invocation's deadline stops them (DeadlineExceededError) and the state retries.
AWS_CALL_SECONDS = 7
#: Seconds each invocation keeps back from its Lambda timeout to return or raise a named error
#: (``nodeheal.deadline.LAMBDA_RESERVE_SECONDS``; a test holds the two equal).
LAMBDA_RESERVE_SECONDS = 3


def lambda_timeout(*, kube_requests: int, aws_calls: int) -> int:
    """The Lambda timeout of a step whose longest sequence of calls is ``kube_requests`` Kubernetes
    requests and ``aws_calls`` AWS calls one after the other, each answered just inside its
    timeouts, plus the deadline's reserve; rounded up to 10 s.

    With it, a step finishes when every call is slow but answered; when calls time out, its
    deadline (this timeout minus the reserve) raises DeadlineExceededError before Lambda kills it.
    Parallel requests (one wave of evictions) count once: the deadline stops a round from starting
    another wave, and the pods it did not reach wait for the next round.
    """
    worst = kube_requests * KUBE_REQUEST_SECONDS + aws_calls * AWS_CALL_SECONDS + LAMBDA_RESERVE_SECONDS
    return int(math.ceil(worst / 10) * 10)


@dataclass(frozen=True, slots=True)
class Calls:
    """The longest sequence of calls one invocation of a step makes, counted in its code."""

    kube_requests: int
    aws_calls: int

    @property
    def timeout_seconds(self) -> int:
        return lambda_timeout(kube_requests=self.kube_requests, aws_calls=self.aws_calls)


#: A line of the local timeline: (kind, text); see ``nodeheal.sim.timeline.TimelineEvent``.
TimelineLine = tuple[str, str]
#: Describes a step's result on the local timeline, or None when the result is not worth a line.
TimelineWording = Callable[[Mapping[str, Any]], TimelineLine | None]


#: D8: every function may tell the cluster what it did to a node as an Event.
EVENTS = PolicyRule(
    ("", "events.k8s.io"),
    ("events",),
    ("create",),
    "Events about what this step did to the node (kubectl describe node).",
)

#: Every mutating step (nodeheal.workflow.guard) reads pause live (read_admission_state: GetItem),
#: remembers a worse fault it reads (remember_sighting: conditional PutItem of the episode
#: memory's entry) and claims its mutation on the lock (claim_mutation: conditional UpdateItem,
#: then GetItem of the holder when the claim is refused). A step declared mutating gets these first.
MUTATION_GUARD = (
    LedgerGrant(("dynamodb:GetItem",), (LedgerItem.LOCK, LedgerItem.ADMISSION)),
    LedgerGrant(("dynamodb:UpdateItem",), (LedgerItem.LOCK,)),
    LedgerGrant(("dynamodb:PutItem",), (LedgerItem.EPISODE,)),
)


#: A counted signal's execution (docs/architecture.md, D22) has no condition on the Node to prove:
#: admit and every step that proves the condition still bad before it mutates re-read the
#: instance's window instead (nodeheal.workflow.counted_condition, read_signal_window: GetItem).
COUNTED_WINDOW_READ = LedgerGrant(("dynamodb:GetItem",), (LedgerItem.SIGNALS,))


def _joined(grants: tuple[LedgerGrant, ...]) -> tuple[LedgerGrant, ...]:
    """Grants on the same items as one grant with the actions of all, in order: IAM's policy
    minimization joins such statements, so the role holds one statement per item set."""
    actions: dict[tuple[LedgerItem, ...], list[str]] = {}
    for grant in grants:
        joined = actions.setdefault(grant.items, [])
        joined.extend(action for action in grant.actions if action not in joined)
    return tuple(LedgerGrant(tuple(names), items) for items, names in actions.items())


#: The reason of the Event every told step writes when it stops (condition cleared, node replaced
#: or gone, paused, superseded): ``nodeheal.workflow.step_events.stopped``.
STOPPED_REASON = "RemediationSkipped"


@dataclass(frozen=True, slots=True)
class Step:
    """One task of the state machine and the function that runs it."""

    #: Logical name: the suffix of the function's name, its ClusterRole's and its Events' author.
    name: str
    #: The task state's name in the state machine, as a person reads it in the console.
    state: str
    #: ``module.function`` inside the Lambda asset.
    handler: str
    description: str
    #: Its longest sequence of calls, from which its Lambda timeout derives. Every step is short
    #: by design: the state machine owns the waiting.
    calls: Calls
    #: The key of the state its result is written under (``ResultPath``), and read from by the
    #: steps after it.
    result_key: str
    #: Claims a mutation of the node on its lock first (``nodeheal.workflow.guard``
    #: ``before_mutation``): a contender can hold it back (``ContendedError``), and it gets the
    #: guard's ledger grants (:data:`MUTATION_GUARD`).
    mutating: bool = False
    #: Running it again after an invocation that may have done part of its work (a Lambda
    #: timeout) does no harm, so the state machine retries ``Sandbox.Timedout``/``Lambda.Unknown``.
    idempotent: bool = True
    #: Its ClusterRole's rules; a step with none never talks to the Kubernetes API (it then gets
    #: neither eks:DescribeCluster nor an access entry, and runs outside the VPC).
    kubernetes_rules: tuple[PolicyRule, ...] = ()
    #: Ledger access beyond the mutation guard's (see :attr:`ledger_grants`).
    ledger: tuple[LedgerGrant, ...] = ()
    #: EC2 mutations allowed, each restricted by the cluster ownership tag condition.
    ec2_mutations: tuple[str, ...] = ()
    #: Needs ec2:DescribeInstances (which supports no resource-level restriction).
    ec2_describe: bool = False
    #: Further EC2 reads, which support no resource-level restriction either (resource ``*``).
    ec2_reads: tuple[str, ...] = ()
    #: EC2 actions on an instance that IAM cannot limit by the ownership tag (the Service
    #: Authorization Reference lists no tag condition key for them): granted on the account's
    #: instances in the stack's region.
    ec2_untagged_instance_actions: tuple[str, ...] = ()
    memory_mb: int = 256
    publishes_notifications: bool = False
    #: The reasons of the Kubernetes Events it writes (``nodeheal.workflow.step_events``), its stop's
    #: included.
    event_reasons: tuple[str, ...] = ()
    #: How the local timeline describes its result; None: it adds no line.
    timeline: TimelineWording | None = None
    #: How many times the longest path of an execution runs it, for a step the worst case
    #: (``nodeheal.worst_case.holding_worst_case``) does not model by name: 0 for a step on a branch
    #: the longest path (drain, reboot, escalation to a replacement) never takes, such as the end
    #: of a cordon-only remediation. The steps the worst case names are counted there.
    runs_on_the_longest_path: int = 1

    @property
    def timeout_seconds(self) -> int:
        """Its Lambda timeout, which the worst case (``nodeheal.worst_case``) counts."""
        return self.calls.timeout_seconds

    @property
    def ledger_grants(self) -> tuple[LedgerGrant, ...]:
        """All its ledger access, the guard's first; none when empty (the function then gets no
        table name either)."""
        return _joined((*MUTATION_GUARD, *self.ledger)) if self.mutating else self.ledger

    @property
    def kubernetes(self) -> bool:
        """Talks to the Kubernetes API of the clusters."""
        return bool(self.kubernetes_rules)


_READ_NODE = PolicyRule(("",), ("nodes",), ("get",), "Re-read the live Node before acting on it.")
#: Pods are listed by node name, so every drain round first proves the Node is still the admitted
#: object (UID, instance, NodeHeal's taint) and its condition still bad (nodeheal.workflow.guard).
_PROVE_NODE = PolicyRule(
    ("",),
    ("nodes",),
    ("get",),
    "Prove the node is still the admitted object, tainted and bad, before each round.",
)


# -- admit -------------------------------------------------------------------------------------------


def _brief_reason(reason: str, limit: int = 150) -> str:
    """The policy's reason in one readable line: the signal, and NodeHeal's own verdict on it."""
    head = re.sub(r"\s*\([^)]*\)", "", reason.split(". ", 1)[0]).strip()
    verdict = re.search(r"NodeHeal: [A-Z_]+: ([^;]+)", reason)
    text = f"{head}; {verdict.group(1).strip()}" if verdict else head
    not_acted = re.search(r"Not acted on: (.+)", reason)
    if not_acted and not_acted.group(0) not in text:
        text = f"{text}. {not_acted.group(0)}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _admission_line(result: Mapping[str, Any]) -> TimelineLine:
    verdict = result.get("verdict")
    decision = result.get("decision") or {}
    note = str(result.get("note", ""))
    if verdict == "stop":
        return "decision", f"stop: {note}"
    if verdict == "confirm":
        return "decision", f"confirming: {note}"
    if verdict == "wait":
        return "decision", f"waiting behind another remediation: {note}"
    action = str(decision.get("action", "?"))
    reason = _brief_reason(str(decision.get("reason", "")))
    if result.get("refused"):
        planned = decision.get("plannedAction", action)
        breaker = " [circuit breaker OPENED]" if result.get("breakerOpened") else ""
        return "decision", f"decision: {action} instead of {planned}{breaker} - {note}"
    escalated = " (escalated)" if decision.get("escalated") else ""
    preempted = f" (took over from {result['preempted']})" if result.get("preempted") else ""
    return "decision", f"decision: {action.upper()}{escalated}{preempted} - {reason}"


ADMIT = Step(
    "admit",
    "Admit",
    "lambdas.admit.handler",
    "Re-read the Node, classify, check budgets and breaker, take the per-node lock",
    # Node get + pool list; lock read/put (+ preempt), pause/budget read+write, history query;
    # a counted signal's window read (nodeheal.workflow.counted_condition).
    Calls(kube_requests=2, aws_calls=8),
    result_key="admission",
    kubernetes_rules=(
        PolicyRule(
            ("",),
            ("nodes",),
            ("get", "list"),
            "Re-read the Node; list its Karpenter pool (label selector) for the unhealthy-share budget.",
        ),
        EVENTS,
    ),
    ledger=(
        # The lock (read_lock: GetItem; acquire_lock and preempt_lock: conditional PutItem;
        # release_lock: conditional DeleteItem when the budget refuses or the node recovered)
        # and the cluster's admission state (read_admission_state, write_admission_state).
        LedgerGrant(("dynamodb:GetItem", "dynamodb:PutItem"), (LedgerItem.LOCK, LedgerItem.ADMISSION)),
        # contend: a conditional UpdateItem telling a busy, less severe holder to stand aside.
        LedgerGrant(("dynamodb:DeleteItem", "dynamodb:UpdateItem"), (LedgerItem.LOCK,)),
        # instance_records: the instance's recent remediations (escalation, attempt limit);
        # sightings: the instance's episode memory (docs/architecture.md, D2).
        LedgerGrant(("dynamodb:Query",), (LedgerItem.RECORDS, LedgerItem.EPISODE)),
        # remember_sighting: a conditional PutItem of an entry of the episode memory;
        # clear_sightings: a conditional UpdateItem marking one cleared (D19).
        LedgerGrant(("dynamodb:PutItem", "dynamodb:UpdateItem"), (LedgerItem.EPISODE,)),
        # A counted signal's condition: the instance's window, still over its count (D22).
        COUNTED_WINDOW_READ,
    ),
    # RemediationSkipped when it finds nothing to do; admit is told by its verdict, never stopped.
    event_reasons=(
        "RemediationDecided",
        "ConfirmationStarted",
        "WaitingForLock",
        "RemediationRefused",
        STOPPED_REASON,
    ),
    timeline=_admission_line,
)


# -- read-capacity -----------------------------------------------------------------------------------


def _capacity_line(result: Mapping[str, Any]) -> TimelineLine | None:
    capacity = result.get("capacity") or {}
    verdict = capacity.get("verdict") or {}
    context = capacity.get("context") or {}
    lifecycle = context.get("lifecycle") or "on-demand"
    reservation = context.get("reservationId") or "no reservation"
    bought = f"{context.get('instanceType') or 'instance'} {lifecycle}, {reservation}"
    if not capacity.get("read"):
        return "capacity", f"capacity not read: {capacity.get('note', '')}"
    if verdict.get("deferredForCapacity"):
        return "capacity", f"replace deferred for capacity ({bought}): block ends {verdict.get('blockEnd')}"
    if verdict.get("capacityReason"):
        return "capacity", f"{verdict.get('action')} kept for capacity ({bought}): scarce pool"
    landing = verdict.get("landingReservation")
    if landing:
        return "capacity", f"replace ({bought}); the replacement belongs in {landing.get('id')}"
    return "capacity", f"replace ({bought}); capacity does not hold it back"


READ_CAPACITY = Step(
    "read-capacity",
    "Read capacity",
    "lambdas.read_capacity.handler",
    "Read how the instance was bought (on-demand, spot, Capacity Block, reservation) before replacing it",
    # DescribeInstances, DescribeCapacityReservations.
    Calls(kube_requests=0, aws_calls=2),
    # It revises the admission's decision, so the steps after read the decision where admit left it.
    result_key=ADMIT.result_key,
    ec2_describe=True,
    ec2_reads=("ec2:DescribeCapacityReservations",),
    timeline=_capacity_line,
)


# -- cordon ------------------------------------------------------------------------------------------


def _cordon_line(result: Mapping[str, Any]) -> TimelineLine:
    if result.get("performed"):
        return "cordoned", "cordoned and tainted nodeheal.io/unhealthy:NoSchedule"
    return "cordoned", f"cordon skipped: {result.get('skipped')}"


CORDON = Step(
    "cordon",
    "Cordon",
    "lambdas.cordon.handler",
    "Cordon and taint the Node, annotate it with the execution and reason",
    # Guard: pause read, node get, a counted signal's window read, lock claim; then the node patch.
    Calls(kube_requests=2, aws_calls=3),
    result_key="cordon",
    mutating=True,
    kubernetes_rules=(
        PolicyRule(
            ("",),
            ("nodes",),
            ("get", "patch"),
            "Read-modify-write of spec.unschedulable, the nodeheal.io/unhealthy taint and annotations.",
        ),
        EVENTS,
    ),
    # Guard: a counted signal's condition, proven by its window (D22).
    ledger=(COUNTED_WINDOW_READ,),
    event_reasons=("Cordoned", STOPPED_REASON),
    timeline=_cordon_line,
)


# -- drain -------------------------------------------------------------------------------------------


def _drain_line(result: Mapping[str, Any]) -> TimelineLine:
    evicted = int(result.get("evicted", 0))
    blocked = int(result.get("pdbBlocked", 0))
    held = int(result.get("heldBackDoNotDisrupt", 0))
    if result.get("done"):
        return "drained", f"drained: {evicted} pod(s) evicted, {blocked} eviction(s) refused by a PDB"
    parts = [f"eviction round {result.get('rounds', 1)}: {evicted} evicted"]
    if result.get("terminating"):
        parts.append(f"{result['terminating']} terminating")
    if result.get("lastBlocked"):
        parts.append(f"{len(result['lastBlocked'])} refused by a PDB (429), retried next round")
    if held:
        parts.append(f"{held} karpenter.sh/do-not-disrupt held back")
    return "drain-round", ", ".join(parts)


DRAIN = Step(
    "drain",
    "Evict pods",
    "lambdas.drain.handler",
    "One eviction round through the Eviction API (PDBs respected)",
    # Guard (node get, pause read, a counted signal's window read, lock claim), pod list, one wave
    # of evictions.
    Calls(kube_requests=3, aws_calls=3),
    result_key="drain",
    mutating=True,
    kubernetes_rules=(
        _PROVE_NODE,
        PolicyRule(
            ("",),
            ("pods",),
            ("list", "delete"),
            "The pods bound to the node (fieldSelector spec.nodeName); after a 409 on an eviction, "
            "the pod of that name (fieldSelector metadata.name): gone, or still there? Delete: "
            "drain.evictionModes delete-after-timeout pods still there after drain.deleteAfterSeconds.",
        ),
        PolicyRule(
            ("",),
            ("pods/eviction",),
            ("create",),
            "Evict through the Eviction API so PodDisruptionBudgets are respected (429 = retry later).",
        ),
        EVENTS,
    ),
    # Guard: a counted signal's condition, proven by its window before each round (D22).
    ledger=(COUNTED_WINDOW_READ,),
    memory_mb=512,
    event_reasons=(
        "Draining",
        "Drained",
        "DrainTimedOut",
        "DrainAborted",
        "DrainRefused",
        "Evicted",
        STOPPED_REASON,
    ),
    timeline=_drain_line,
)


# -- force-drain -------------------------------------------------------------------------------------

FORCE_DRAIN = Step(
    "force-drain",
    "Force-delete remaining pods",
    "lambdas.force_drain.handler",
    "Delete the pods left after the drain timeout with the configured grace period",
    # Guard (with a counted signal's window read), pod list, one wave of deletions.
    Calls(kube_requests=3, aws_calls=3),
    # It ends the drain, so the steps after read its result where the drain's was.
    result_key=DRAIN.result_key,
    mutating=True,
    kubernetes_rules=(
        _PROVE_NODE,
        PolicyRule(
            ("",),
            ("pods",),
            ("list", "delete"),
            "After the drain timeout with drain.onTimeout=force: delete the pods left, with the "
            "configured grace period (after a 409, list the pod by name: gone, or still there?).",
        ),
        EVENTS,
    ),
    # Guard: a counted signal's condition, proven by its window (D22).
    ledger=(COUNTED_WINDOW_READ,),
    memory_mb=512,
    event_reasons=("DrainForced", "ForceDeleted", STOPPED_REASON),
    timeline=lambda result: ("forced", f"drain timed out: force-deleted {result.get('forced', 0)} pod(s)"),
)


# -- terminate and reboot ----------------------------------------------------------------------------


def _instance_action_line(result: Mapping[str, Any], call: str, kind: str) -> TimelineLine:
    if not result.get("performed"):
        return kind, f"{call} not called: {result.get('skipped')}"
    instance = result.get("instanceId", "")
    if result.get("alreadyGone"):
        return kind, f"{call} {instance}: already gone ({result.get('previousState')})"
    escalation = " (reboot did not heal it)" if result.get("escalation") else ""
    return kind, f"EC2 {call} {instance}{escalation}"


def _terminate_line(result: Mapping[str, Any]) -> TimelineLine:
    if result.get("deferredForCapacity"):
        return "capacity", f"TerminateInstances not called: {result.get('note', '')}"
    if result.get("nodeClaim"):
        gone = " (already gone)" if result.get("alreadyGone") else ""
        return "terminated", (
            f"deleted NodeClaim {result.get('nodeClaim')}{gone}: Karpenter terminates "
            f"{result.get('instanceId', '')}"
        )
    return _instance_action_line(result, "TerminateInstances", "terminated")


TERMINATE = Step(
    "terminate",
    "Terminate instance",
    "lambdas.terminate.handler",
    "Verify ownership and the live condition, then terminate the EC2 instance",
    # Guard (with a counted signal's window read), DescribeInstances, ReportInstanceStatus,
    # TerminateInstances, optional node delete.
    Calls(kube_requests=2, aws_calls=6),
    result_key="instance",
    mutating=True,
    # The optional node-delete and NodeClaim roles: nodeheal.rbac, NODE_DELETE and NODECLAIM_DELETE.
    kubernetes_rules=(_READ_NODE, EVENTS),
    # Guard: a counted signal's condition, proven by its window (D22).
    ledger=(COUNTED_WINDOW_READ,),
    ec2_mutations=("ec2:TerminateInstances",),
    ec2_describe=True,
    # The impaired-hardware report before the instance goes, whichever replace.method ends it.
    ec2_untagged_instance_actions=("ec2:ReportInstanceStatus",),
    event_reasons=("Terminating", "ReplacementDeferred", STOPPED_REASON),
    timeline=_terminate_line,
)

REBOOT = Step(
    "reboot",
    "Reboot instance",
    "lambdas.reboot.handler",
    "Verify ownership and the live condition, then reboot the EC2 instance",
    # Guard (with a counted signal's window read), DescribeInstances, RebootInstances.
    Calls(kube_requests=1, aws_calls=5),
    result_key=TERMINATE.result_key,
    mutating=True,
    # A second RebootInstances is a second reboot.
    idempotent=False,
    kubernetes_rules=(_READ_NODE, EVENTS),
    ledger=(
        # sightings: a fault remembered in this episode that calls for replacement (D2).
        LedgerGrant(("dynamodb:Query",), (LedgerItem.EPISODE,)),
        # Guard: a counted signal's condition, proven by its window (D22).
        COUNTED_WINDOW_READ,
    ),
    ec2_mutations=("ec2:RebootInstances",),
    ec2_describe=True,
    # RemediationSkipped also when the instance is already shutting down or gone.
    event_reasons=("Rebooting", "EscalatedToReplace", STOPPED_REASON),
    timeline=lambda result: _instance_action_line(result, "RebootInstances", "rebooted"),
)


# -- check-recovery ----------------------------------------------------------------------------------


def _recovery_line(result: Mapping[str, Any]) -> TimelineLine | None:
    status = result.get("status")
    if status == "pending":
        return None  # one line per poll would drown the timeline; the outcome follows
    return (
        "recovered" if status == "recovered" else "recovery-failed",
        f"recovery {status}: {result.get('detail', '')}",
    )


CHECK_RECOVERY = Step(
    "check-recovery",
    "Check recovery",
    "lambdas.check_recovery.handler",
    "After a reboot: new boot ID, Ready, condition healthy?",
    Calls(kube_requests=1, aws_calls=0),
    result_key="recovery",
    kubernetes_rules=(
        PolicyRule(("",), ("nodes",), ("get",), "New boot ID, Ready, the condition healthy?"),
        EVENTS,
    ),
    event_reasons=("Recovered", "RecoveryFailed", STOPPED_REASON),
    timeline=_recovery_line,
)


# -- uncordon ----------------------------------------------------------------------------------------

UNCORDON = Step(
    "uncordon",
    "Uncordon",
    "lambdas.uncordon.handler",
    "Undo NodeHeal's cordon after a successful reboot",
    Calls(kube_requests=2, aws_calls=2),
    result_key="uncordon",
    mutating=True,
    kubernetes_rules=(
        PolicyRule(
            ("",),
            ("nodes",),
            ("get", "patch"),
            "Remove NodeHeal's taint and annotations; clear spec.unschedulable only if NodeHeal set it.",
        ),
        EVENTS,
    ),
    event_reasons=("Uncordoned", STOPPED_REASON),
    timeline=lambda result: ("uncordoned", "uncordoned: back in service"),
)


# -- record and record-failure ----------------------------------------------------------------------

#: record, record-failure and the finalizer: execution_end (GetItem of the end marker),
#: put_record (PutItem of the instance's record), release_lock (conditional DeleteItem),
#: withdraw_contention (conditional UpdateItem of the lock, for an execution that contended a
#: holder), lock_holder (GetItem of the lock: a superseded execution is told to a person when no
#: successor holds the node), giving the budget slot back (read_admission_state,
#: write_admission_state), mark_execution_ended (conditional PutItem of the end marker).
RECORD_GRANTS = (
    LedgerGrant(("dynamodb:PutItem",), (LedgerItem.RECORDS, LedgerItem.ADMISSION, LedgerItem.END)),
    LedgerGrant(("dynamodb:GetItem",), (LedgerItem.ADMISSION, LedgerItem.END, LedgerItem.LOCK)),
    LedgerGrant(("dynamodb:DeleteItem", "dynamodb:UpdateItem"), (LedgerItem.LOCK,)),
)


def _record_line(result: Mapping[str, Any]) -> TimelineLine:
    outcome = result.get("outcome", "")
    return "recorded", f"recorded in the ledger: {outcome} - {result.get('summary', '')}"


RECORD = Step(
    "record",
    "Record outcome",
    "lambdas.record.handler",
    "Write the remediation record, release the lock and budget slot, notify",
    # End marker read, record put, lock release, budget read+write, publish, end marker put.
    Calls(kube_requests=0, aws_calls=7),
    result_key="record",
    ledger=RECORD_GRANTS,
    publishes_notifications=True,
    timeline=_record_line,
)

#: No cluster access, so it tells no Event: the notification and the history carry a failure.
RECORD_FAILURE = Step(
    "record-failure",
    "Record failure",
    "lambdas.record_failure.handler",
    "Record a failed remediation (node stays cordoned), release the lock, notify",
    Calls(kube_requests=0, aws_calls=7),
    result_key=RECORD.result_key,
    ledger=RECORD_GRANTS,
    publishes_notifications=True,
    timeline=_record_line,
)


#: Every step, in the order the stack deploys their functions and the RBAC manifest lists them.
STEPS: tuple[Step, ...] = (
    ADMIT,
    READ_CAPACITY,
    CORDON,
    DRAIN,
    FORCE_DRAIN,
    TERMINATE,
    REBOOT,
    CHECK_RECOVERY,
    UNCORDON,
    RECORD,
    RECORD_FAILURE,
)


def step_named(name: str) -> Step:
    for step in STEPS:
        if step.name == name:
            return step
    raise KeyError(name)


def step_of_handler(handler: str) -> Step | None:
    """The step whose function runs ``handler`` (``lambdas.<module>.handler``), if any."""
    return next((step for step in STEPS if step.handler == handler), None)
