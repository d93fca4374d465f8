"""The safety mutants of ``make mutate``: each takes one safety check out of NodeHeal, and the
seeded simulation alone, with no unit test and no fault planned by hand, must catch it.

A check that no simulated schedule can break is not tested by the simulation: it rests on a unit
test, which only asks the questions its author thought of. Each mutant below replaces the smallest
piece that holds one check by the same code without it (the replacement is written out, not
monkeypatched line by line, so what it leaves out is visible). ``tests/simulation/
test_mutation_gate.py`` applies each in turn and searches seeds until an invariant breaks.

Every new safety check enters :data:`MUTANTS` with its mutant, and the table in
``docs/simulation-finds-the-safety-defects.md`` with the schedule that caught it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from nodeheal.actions import Mode
from nodeheal.config import ReplaceSettings
from nodeheal.errors import NodeGoneError, NodeReplacedError
from nodeheal.exporter import node_events
from nodeheal.exporter.transitions import CachedNode
from nodeheal.kube_views import LiveNode
from nodeheal.policy.decide import Decision
from nodeheal.sim.seeded.memory_ledger import MemoryLedger
from nodeheal.workflow import admission, budget, capacity, finalizer, guard, mutations
from nodeheal.workflow.capacity import CapacityContext, CapacityVerdict
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.ports import KubeAccess, LedgerPort
from nodeheal.workflow.state import WorkflowState
from tests.simulation.before_the_fixes import REVERTS, Patch


@dataclass(frozen=True)
class Mutant:
    number: int
    #: The safety check it takes out, as the issue names it.
    check: str
    patches: tuple[Patch, ...]
    #: The invariants whose promise the check keeps: only a schedule that breaks one of these
    #: catches the mutant (another invariant broken first may be another layer's doing).
    invariants: tuple[str, ...] = ()


# -- 1-3: the guard's proof that the live node is the admitted one -------------------------------


def _prove_admitted_without(*, uid: bool = True, instance: bool = True, taint: bool = True) -> Any:
    """``guard.prove_admitted`` with one of its three comparisons left out."""

    def prove_admitted(state: WorkflowState, kube: KubeAccess, *, require_taint: bool) -> LiveNode:
        admitted = guard.admitted_node(state)
        node = kube.nodes.get(admitted.name)
        if node is None:
            raise NodeGoneError(f"node {admitted.name} was deleted")
        other_object = uid and node.uid != admitted.uid
        other_instance = instance and (node.instance_id or "") != admitted.instance_id
        if other_object or other_instance:
            raise NodeReplacedError(f"node name {admitted.name} now belongs to another object")
        if taint and require_taint and not node.cordoned_by_nodeheal:
            raise NodeReplacedError(f"node {admitted.name} no longer carries NodeHeal's taint")
        return node

    return prove_admitted


# -- 4: the lock claim before every mutation -------------------------------------------------------


def _before_mutation_without_claim(
    state: WorkflowState,
    kube: KubeAccess,
    ledger: LedgerPort,
    *,
    live_mode: Mode,
    allowed: tuple[Mode, ...],
    step: str,
    require_taint: bool,
    now: datetime,
    require_bad: bool = True,
    not_ready_counts: bool = False,
) -> LiveNode:
    """``guard.before_mutation`` without ``ledger.claim_mutation``: a step no longer proves that
    its execution still holds the node's lock."""
    guard.require_mode(live_mode, allowed=allowed, step=step)
    guard.require_not_paused(state, ledger, step=step)
    node = guard.prove_admitted(state, kube, require_taint=require_taint)
    guard.remember_worse(state, ledger, node, now)
    if require_bad:
        guard.require_still_bad(state, node, not_ready_counts=not_ready_counts)
    return node


# -- 5: the EC2 ownership tag ----------------------------------------------------------------------


def _owns_everything(*_: Any, **__: Any) -> None:
    """``verify_ownership`` that accepts any instance, tagged for this cluster or not."""


# -- 6: the budget verdict ---------------------------------------------------------------------------

_TAKE_BUDGET_SLOT = admission._take_budget_slot


def _budget_verdict_ignored(*args: Any) -> budget.BudgetVerdict:
    """The budgets are asked, and their refusal is ignored."""
    verdict: budget.BudgetVerdict = _TAKE_BUDGET_SLOT(*args)
    return replace(verdict, admitted=True)


# -- 7: the episode memory (EPISODE# items) ----------------------------------------------------------


def _remembers_nothing(self: MemoryLedger, cluster: str, subject: str, sighting: Sighting) -> bool:
    return False


def _recalls_nothing(self: MemoryLedger, cluster: str, subject: str) -> list[Sighting]:
    return []


# -- 8: the finalizer's and the sweeper's release -----------------------------------------------------

_RECORD_FAILURE = finalizer.record_failure


class _ReleasesNothing:
    """The ledger as the finalizer sees it, with every release a no-op: the lock, the budget slot
    and the contender mark of an execution that ended outside any Catch stay taken."""

    def __init__(self, ledger: LedgerPort) -> None:
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def release_lock(self, *_: Any) -> bool:
        return False

    def withdraw_contention(self, *_: Any) -> bool:
        return False

    def write_admission_state(self, state: Any) -> Any:
        return state


def _finalizer_releases_nothing(state: WorkflowState, ledger: LedgerPort, *args: Any, **kwargs: Any) -> Any:
    return _RECORD_FAILURE(state, _ReleasesNothing(ledger), *args, **kwargs)


# -- 10: the Capacity Block rule ----------------------------------------------------------------------


def _block_never_defers(
    unchanged: CapacityVerdict,
    context: CapacityContext,
    replace: ReplaceSettings,
    drain_worst_case_seconds: int,
    now: datetime,
) -> CapacityVerdict:
    """``capacity._block_verdict`` without the rule: a replacement goes ahead however soon the
    block reclaims it."""
    return unchanged


# -- 12: the Capacity Block rule again at an escalation -----------------------------------------------


def _escalation_never_defers(state: WorkflowState, now: datetime) -> str:
    """``capacity.block_note_at_escalation`` without the check: a reboot that turns into a
    replacement after the cordon terminates however soon the block reclaims the instance."""
    return ""


# -- 13: which instance a Node Event is about (D10) ---------------------------------------------------


def _attributed_by_name_alone(event: Mapping[str, Any], cached: CachedNode | None) -> CachedNode | None:
    """``node_events.attributed_node`` without D10's proof: the Node cached under the Event's name
    is taken for the Event's, whatever its uid or creation time says, so an Event of an earlier
    Node of that name counts for the instance that took the name over."""
    return cached


# -- 11: the scarce-pool rule --------------------------------------------------------------------------


def _never_keeps_rebooting(
    decision: Decision, context: CapacityContext, pool: str | None, replace: ReplaceSettings
) -> bool:
    """``capacity._keeps_rebooting`` without the rule: a reboot escalated by rebootEscalationHours
    is replaced, on scarce on-demand capacity too."""
    return False


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        1,
        "the Node UID comparison in the guard (with the taint check, which alone stops every step "
        "after the cordon on a node registered again; the cordon's patch carries the UID as a "
        "precondition)",
        (Patch(guard, "prove_admitted", _prove_admitted_without(uid=False, taint=False)),),
        invariants=("I1 only the admitted node",),
    ),
    Mutant(
        2,
        "the instance-ID comparison in the guard (with admission's wait for the instance, which "
        "alone makes the comparison unreachable: the API server lets a providerID change only once, "
        "from empty)",
        (
            Patch(guard, "prove_admitted", _prove_admitted_without(instance=False)),
            Patch(admission, "names_no_instance", lambda node: False),
        ),
        invariants=("I1 only the admitted node",),
    ),
    Mutant(
        3,
        "the taint check after cordon",
        (Patch(guard, "prove_admitted", _prove_admitted_without(taint=False)),),
        invariants=("I16 a node a person took back is left alone",),
    ),
    Mutant(
        4,
        "the lock claim before every mutation",
        (Patch(guard, "before_mutation", _before_mutation_without_claim),),
        invariants=("I9 one execution mutates a node at a time",),
    ),
    Mutant(
        5,
        "the EC2 ownership-tag check",
        (Patch(mutations, "verify_ownership", _owns_everything),),
        invariants=("I1 only the admitted node",),
    ),
    Mutant(
        6,
        "the budget verdict",
        (Patch(admission, "_take_budget_slot", _budget_verdict_ignored),),
        invariants=("I3 budgets",),
    ),
    Mutant(
        7,
        "the EPISODE# sightings, read and written (the record-based worst fault stays)",
        (
            Patch(MemoryLedger, "remember_sighting", _remembers_nothing),
            Patch(MemoryLedger, "sightings", _recalls_nothing),
        ),
        invariants=("I8 severity only rises", "I13 no fault decided below its severity"),
    ),
    Mutant(
        8,
        "the finalizer's and the sweeper's release",
        (Patch(finalizer, "record_failure", _finalizer_releases_nothing),),
        invariants=("I4 every execution accounted for",),
    ),
    Mutant(
        9,
        "refuse decided before the holds",
        REVERTS["refuse before the holds"],
        invariants=("I14 refuse evicts nothing",),
    ),
    Mutant(
        10,
        "the Capacity Block rule (a replacement must live minBlockRemainingMinutes before the block "
        "reclaims it)",
        (Patch(capacity, "_block_verdict", _block_never_defers),),
        invariants=("I17 no replacement into a Capacity Block about to reclaim it",),
    ),
    Mutant(
        11,
        "the scarce-pool rule (a reboot-class fault on scarce on-demand capacity keeps rebooting)",
        (Patch(capacity, "_keeps_rebooting", _never_keeps_rebooting),),
        invariants=("I18 a scarce pool's on-demand instance is rebooted, not replaced",),
    ),
    Mutant(
        12,
        "the Capacity Block rule at an escalation (a reboot turned into a replacement checks the block "
        "again at the terminate step)",
        # The terminate step holds the function it imported by name.
        (Patch(mutations, "block_note_at_escalation", _escalation_never_defers),),
        invariants=("I17 no replacement into a Capacity Block about to reclaim it",),
    ),
    Mutant(
        13,
        "a count attributed to the wrong instance (the exporter attaches a Node Event to the Node "
        "cached under its name, without D10's proof by uid or creation time)",
        # The shipper calls the function it imported by name.
        (Patch(node_events, "attributed_node", _attributed_by_name_alone),),
        invariants=("I19 no count attributed to another instance",),
    ),
)

__all__ = ["MUTANTS", "Mutant"]
