"""Replace with capacity in mind: the decision revised for the capacity behind the instance. Pure.

:func:`nodeheal.policy.decide.decide` judges the fault; this module judges whether the action it
chose can get its capacity back (docs/architecture.md, D12). It reads no AWS API: the caller
describes the instance and its reservation in a :class:`CapacityContext`. Three rules:

1. **A Capacity Block that ends soon.** EC2 begins terminating a Capacity Block's instances 30
   minutes before ``EndDate`` (60 minutes for UltraServer types; Karpenter 1.6+ starts draining
   them 10 minutes before that). A replacement is useful only if it would run for at least
   ``replace.minBlockRemainingMinutes`` before that moment, counting the drain's worst case and
   ``replace.launchMinutes``. If it would not: do not replace; the action becomes cordon (the node
   is cordoned, a person is told why, naming the block's end), the planned action stays replace,
   and the result says "deferred for capacity". This counts as a decision at the fault's severity
   (the planned action stays), never as a lower decision.
2. **Scarce on-demand capacity.** ``replace.scarcePools`` says which pools are scarce (NodeHeal
   does not guess). For a reboot-class fault (planned reboot, escalated to replace by decide's
   ``rebootEscalationHours`` rule) on an on-demand instance with no reservation behind it, in a
   scarce pool: keep rebooting instead of escalating, up to the attempt cap, and say that capacity
   was the reason. At the cap decide has already made it an alert: nothing is replaced
   automatically.
3. **Replacing inside an ODCR or a Capacity Block**: the verdict records which reservation the
   replacement should land in (reservation id and type), for the record.

The revision never touches the planned action, so severity within an episode (D2, D19) is what
the fault asked for, whatever capacity allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodeheal.actions import Action, action_at
from nodeheal.config import ReplaceSettings
from nodeheal.errors import InvalidEventError
from nodeheal.policy.decide import Decision
from nodeheal.timestamps import format_timestamp, parse_timestamp
from nodeheal.workflow.ports import CapacityPort
from nodeheal.workflow.state import WorkflowState
from nodeheal.workflow.verdicts import PROCEED
from nodeheal.worst_case import drain_worst_case_seconds

#: ``InstanceLifecycle`` as DescribeInstances reports it; absent (here "") for on-demand.
ON_DEMAND = ""
CAPACITY_BLOCK = "capacity-block"
#: ``CapacityReservation.ReservationType``: "default" is an On-Demand Capacity Reservation.
RESERVATION_ODCR = "default"
RESERVATION_TYPES = (RESERVATION_ODCR, CAPACITY_BLOCK)

#: EC2 begins terminating a Capacity Block's instances this long before its ``EndDate``: "Thirty
#: minutes before the reservation expires, we begin to terminate any instances that are still
#: running in the Capacity Block"
#: (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html).
BLOCK_TERMINATION_LEAD = timedelta(minutes=30)
#: ...and this long before it for UltraServer Capacity Blocks: the instances of a P6e-GB200
#: UltraServer block are to be terminated 60 minutes before its end (the comparison of instance and
#: UltraServer Capacity Blocks at
#: https://dev.classmethod.jp/articles/ec2-capacity-blocks-for-ml-instance-cb-vs-ultraserver-cb).
#: That page names P6e-GB200 only; D12 applies the 60 minutes to every UltraServer type, which errs
#: towards leaving a node cordoned rather than replacing it into a block about to be reclaimed.
ULTRASERVER_TERMINATION_LEAD = timedelta(minutes=60)
#: Instance families that exist only as members of an UltraServer. ``p6e-gb200`` (the
#: ``p6e-gb200.36xlarge`` instances of the ``u-p6e-gb200x36``/``x72`` UltraServers,
#: https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UltraServer.html, and "P6e-GB200
#: UltraServer Capacity Blocks" at
#: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html); ``trn2u``
#: ("A Trn2 UltraServer comprises four trn2u.48xlarge instances",
#: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trn2-arch.html).
#: A plain ``trn2.48xlarge`` is not one: it keeps the 30-minute lead.
ULTRASERVER_FAMILIES = frozenset({"p6e-gb200", "trn2u"})
#: Karpenter 1.6+ begins draining a Capacity Block node this long before EC2 begins terminating
#: it, matching EC2's expiration warning event (aws/karpenter-provider-aws,
#: designs/capacity-block-support.md, "Interruption"). The replacement's pods leave then, so its
#: useful life ends there. A node Karpenter does not manage keeps these 10 minutes; counting them
#: anyway errs towards not replacing, which only leaves a broken node cordoned a little sooner.
KARPENTER_BLOCK_DRAIN_LEAD = timedelta(minutes=10)

# ``CapacityVerdict.capacity_reason`` values: why capacity changed the action ("" when it did not).
REASON_BLOCK_ENDING = "capacity-block-ending"
REASON_SCARCE_POOL = "scarce-pool"
CAPACITY_REASONS = ("", REASON_BLOCK_ENDING, REASON_SCARCE_POOL)


@dataclass(frozen=True, slots=True)
class CapacityContext:
    """The capacity behind one instance, as the EC2 adapter describes it (DescribeInstances and
    DescribeCapacityReservations); the domain reads nothing else."""

    #: ``InstanceLifecycle``: "" (on-demand), "spot", "scheduled", "capacity-block",
    #: "interruptible-capacity-reservation".
    lifecycle: str = ON_DEMAND
    #: ``CapacityReservationId`` of the instance, "" when no reservation is behind it.
    reservation_id: str = ""
    #: The reservation's ``ReservationType``: "default" (an ODCR), "capacity-block", or "" unknown.
    reservation_type: str = ""
    #: The reservation's ``EndDate``; None when it has none or it could not be read.
    reservation_end: datetime | None = None
    instance_type: str = ""
    #: The instance's AMI; carried for the record (a replacement in a block must use the block's
    #: platform), no rule reads it.
    image_id: str = ""

    def __post_init__(self) -> None:
        if self.reservation_end is not None and self.reservation_end.utcoffset() is None:
            # A naive end cannot be compared with the clock without guessing its zone.
            raise ValueError(f"reservation_end must carry a time zone, got {self.reservation_end!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "lifecycle": self.lifecycle,
            "reservationId": self.reservation_id,
            "reservationType": self.reservation_type,
            "reservationEnd": format_timestamp(self.reservation_end) if self.reservation_end else None,
            "instanceType": self.instance_type,
            "imageId": self.image_id,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CapacityContext:
        """Read back :meth:`to_json` (the context travels in ``$.admission.capacity``)."""
        end = raw.get("reservationEnd")
        return cls(
            lifecycle=str(raw.get("lifecycle", "")),
            reservation_id=str(raw.get("reservationId", "")),
            reservation_type=str(raw.get("reservationType", "")),
            reservation_end=None if end is None else parse_timestamp(end, "capacity.context.reservationEnd"),
            instance_type=str(raw.get("instanceType", "")),
            image_id=str(raw.get("imageId", "")),
        )

    @property
    def in_capacity_block(self) -> bool:
        return CAPACITY_BLOCK in (self.lifecycle, self.reservation_type)

    @property
    def reserved(self) -> bool:
        """Whether any reservation (an ODCR or a Capacity Block) stands behind the instance."""
        return bool(self.reservation_id) or bool(self.reservation_type) or self.in_capacity_block

    @property
    def is_ultraserver(self) -> bool:
        return self.instance_type.split(".", 1)[0] in ULTRASERVER_FAMILIES

    @property
    def termination_lead(self) -> timedelta:
        """How long before its block's end EC2 begins terminating this instance."""
        return ULTRASERVER_TERMINATION_LEAD if self.is_ultraserver else BLOCK_TERMINATION_LEAD


@dataclass(frozen=True, slots=True)
class LandingReservation:
    """The reservation a replacement should launch into. Karpenter launches into it only when the
    EC2NodeClass's ``capacityReservationSelectorTerms`` select it: this says where it belongs."""

    id: str
    #: "default" (an ODCR) or "capacity-block".
    type: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type}

    @classmethod
    def from_json(cls, raw: Any) -> LandingReservation:
        if not isinstance(raw, Mapping):
            raise InvalidEventError(
                f"capacity.landingReservation must be an object or null, got {type(raw).__name__}"
            )
        reservation_id, reservation_type = raw.get("id"), raw.get("type")
        if not isinstance(reservation_id, str) or not reservation_id:
            raise InvalidEventError(
                f"capacity.landingReservation.id must be a non-empty string, got {reservation_id!r}"
            )
        if reservation_type not in RESERVATION_TYPES:
            raise InvalidEventError(
                f"capacity.landingReservation.type must be one of {', '.join(RESERVATION_TYPES)}; "
                f"got {reservation_type!r}"
            )
        return cls(id=reservation_id, type=str(reservation_type))


@dataclass(frozen=True, slots=True)
class CapacityVerdict:
    """The decision's action after the capacity rules, and why."""

    #: What the workflow does now.
    action: Action
    #: What the fault asked for: the decision's own, never changed here.
    planned_action: Action
    #: The decision's reboot-to-replace escalation, as decide set it; False once rule 2 undid it.
    escalated: bool
    #: Sentences for a person, appended to the decision's reason.
    notes: tuple[str, ...] = ()
    #: Rule 1 held the replacement back: the node is cordoned and a person is told.
    deferred_for_capacity: bool = False
    #: Why capacity changed the action (:data:`CAPACITY_REASONS`), "" when it did not.
    capacity_reason: str = ""
    #: Where the replacement should land, when it replaces inside a reservation (rule 3).
    landing_reservation: LandingReservation | None = None
    #: The Capacity Block's end, when a block rule looked at it.
    block_end: datetime | None = None

    def revise(self, decision: Decision) -> Decision:
        """``decision`` with this verdict's action, escalation and notes."""
        return dataclasses.replace(
            decision,
            action=self.action,
            escalated=self.escalated,
            reason=decision.reason + "".join(f". {note}" for note in self.notes),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "plannedAction": self.planned_action.value,
            "escalated": self.escalated,
            "notes": list(self.notes),
            "deferredForCapacity": self.deferred_for_capacity,
            "capacityReason": self.capacity_reason,
            "landingReservation": self.landing_reservation.to_json() if self.landing_reservation else None,
            "blockEnd": format_timestamp(self.block_end) if self.block_end else None,
        }

    @classmethod
    def from_json(cls, raw: Any) -> CapacityVerdict:
        """Read back :meth:`to_json` (a verdict travels with the decision through the state)."""
        if not isinstance(raw, Mapping):
            raise InvalidEventError(f"capacity must be an object, got {type(raw).__name__}")
        action, planned = (
            action_at(raw, "action", where="capacity"),
            action_at(raw, "plannedAction", where="capacity"),
        )
        escalated, deferred = raw.get("escalated", False), raw.get("deferredForCapacity", False)
        if not isinstance(escalated, bool) or not isinstance(deferred, bool):
            raise InvalidEventError("capacity.escalated and capacity.deferredForCapacity must be booleans")
        notes = raw.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
            raise InvalidEventError("capacity.notes must be a list of strings")
        reason = raw.get("capacityReason", "")
        if reason not in CAPACITY_REASONS:
            allowed = ", ".join(repr(r) for r in CAPACITY_REASONS)
            raise InvalidEventError(f"capacity.capacityReason must be one of {allowed}; got {reason!r}")
        if deferred and (reason != REASON_BLOCK_ENDING or action is not Action.CORDON):
            raise InvalidEventError(
                f"capacity.deferredForCapacity is true only with capacityReason {REASON_BLOCK_ENDING!r} "
                f"and action cordon; got {reason!r} and {action.value}"
            )
        landing = raw.get("landingReservation")
        block_end = raw.get("blockEnd")
        return cls(
            action=action,
            planned_action=planned,
            escalated=escalated,
            notes=tuple(notes),
            deferred_for_capacity=deferred,
            capacity_reason=str(reason),
            landing_reservation=None if landing is None else LandingReservation.from_json(landing),
            block_end=None if block_end is None else parse_timestamp(block_end, "capacity.blockEnd"),
        )


def block_usable_until(context: CapacityContext) -> datetime | None:
    """When a node in ``context``'s Capacity Block stops being useful: Karpenter's drain before
    EC2's termination before ``EndDate``. None without a known end."""
    if context.reservation_end is None:
        return None
    return context.reservation_end - context.termination_lead - KARPENTER_BLOCK_DRAIN_LEAD


def replacement_ready_by(now: datetime, *, drain_worst_case_seconds: int, launch_minutes: int) -> datetime:
    """The latest a replacement decided ``now`` takes pods: NodeHeal's drain at its worst, then the
    terminate call, the slot's cleanup and the launch (``replace.launchMinutes``)."""
    return now + timedelta(seconds=drain_worst_case_seconds, minutes=launch_minutes)


def revise_for_capacity(
    decision: Decision,
    context: CapacityContext,
    *,
    pool: str | None,
    replace: ReplaceSettings,
    drain_worst_case_seconds: int,
    now: datetime,
) -> CapacityVerdict:
    """Apply the capacity rules (module docstring) to ``decision`` for the instance ``context``
    describes, a node of ``pool`` (its ``policy.nodePoolLabel`` value). ``drain_worst_case_seconds``
    is the longest NodeHeal's drain can take under the deployed settings (the drain terms of
    :func:`nodeheal.worst_case.holding_worst_case`)."""
    if drain_worst_case_seconds < 0:
        raise ValueError(f"drain_worst_case_seconds must be >= 0, got {drain_worst_case_seconds}")
    if now.utcoffset() is None:
        raise ValueError(f"now must carry a time zone, got {now!r}")
    unchanged = CapacityVerdict(
        action=decision.action, planned_action=decision.planned_action, escalated=decision.escalated
    )

    if _keeps_rebooting(decision, context, pool, replace):
        return dataclasses.replace(
            unchanged,
            action=Action.REBOOT,
            escalated=False,
            capacity_reason=REASON_SCARCE_POOL,
            notes=(
                f"kept as reboot for capacity: node pool {pool!r} is scarce (replace.scarcePools) and the "
                "instance is on-demand with no capacity reservation behind it, so a replacement may not "
                "come back; it is rebooted again instead of replaced, until maxAttemptsPerNode makes it "
                "an alert for a person",
            ),
        )

    if decision.action is not Action.REPLACE:
        # Nothing is replaced, so no capacity is given up: dry-run, cordon-only, the attempt cap,
        # opt-out and the cheaper actions all stand as decided.
        return unchanged

    if context.in_capacity_block:
        verdict = _block_verdict(unchanged, context, replace, drain_worst_case_seconds, now)
        if verdict.deferred_for_capacity:
            return verdict
    else:
        verdict = unchanged
    landing = _landing(context)
    if landing is None:
        return verdict
    kind = "Capacity Block" if landing.type == CAPACITY_BLOCK else "On-Demand Capacity Reservation"
    return dataclasses.replace(
        verdict,
        landing_reservation=landing,
        notes=(
            *verdict.notes,
            f"the replacement should land in {kind} {landing.id}, where this instance ran (Karpenter "
            "launches into it only when the EC2NodeClass's capacityReservationSelectorTerms select it)",
        ),
    )


def _keeps_rebooting(
    decision: Decision, context: CapacityContext, pool: str | None, replace: ReplaceSettings
) -> bool:
    """Rule 2: a reboot that decide escalated to replace, on scarce on-demand capacity."""
    return (
        decision.planned_action is Action.REBOOT
        and decision.escalated
        and decision.action is Action.REPLACE
        and context.lifecycle == ON_DEMAND
        and not context.reserved
        and replace.is_scarce(pool)
    )


def _block_verdict(
    unchanged: CapacityVerdict,
    context: CapacityContext,
    replace: ReplaceSettings,
    drain_worst_case_seconds: int,
    now: datetime,
) -> CapacityVerdict:
    """Rule 1: replace in a Capacity Block only if the replacement would live long enough."""
    block = context.reservation_id or "(id unknown)"
    usable_until = block_usable_until(context)
    if context.reservation_end is None or usable_until is None:
        return dataclasses.replace(
            unchanged,
            notes=(
                f"Capacity Block {block} has no known end date, so how long a replacement would live "
                "could not be checked; the replacement goes ahead",
            ),
        )
    end = context.reservation_end
    ready_by = replacement_ready_by(
        now, drain_worst_case_seconds=drain_worst_case_seconds, launch_minutes=replace.launch_minutes
    )
    remaining = usable_until - ready_by
    minimum_minutes = replace.min_block_remaining_minutes
    minimum = timedelta(minutes=minimum_minutes)
    lead_minutes = int(context.termination_lead.total_seconds() // 60)
    ultraserver = f" ({context.instance_type} is an UltraServer type)" if context.is_ultraserver else ""
    timing = (
        f"Capacity Block {block} ends at {format_timestamp(end)}; EC2 starts terminating its instances "
        f"{lead_minutes} min before that{ultraserver} and Karpenter drains them "
        f"{int(KARPENTER_BLOCK_DRAIN_LEAD.total_seconds() // 60)} min earlier, at "
        f"{format_timestamp(usable_until)}. A replacement would take pods by {format_timestamp(ready_by)} "
        f"at the latest (drain worst case {drain_worst_case_seconds} s + replace.launchMinutes "
        f"{replace.launch_minutes}), leaving {_minutes(remaining)}"
    )
    if remaining >= minimum:
        return dataclasses.replace(
            unchanged,
            block_end=end,
            notes=(f"{timing}, at least replace.minBlockRemainingMinutes={minimum_minutes}",),
        )
    return dataclasses.replace(
        unchanged,
        action=Action.CORDON,
        deferred_for_capacity=True,
        capacity_reason=REASON_BLOCK_ENDING,
        block_end=end,
        notes=(
            f"deferred for capacity: {timing}, under replace.minBlockRemainingMinutes={minimum_minutes}. "
            "The node stays cordoned and is not replaced; a person decides what to do before the block "
            f"ends at {format_timestamp(end)}",
        ),
    )


def _landing(context: CapacityContext) -> LandingReservation | None:
    """Rule 3: the reservation a replacement of this instance belongs in, if one is known."""
    if not context.reservation_id:
        return None
    if context.in_capacity_block:
        return LandingReservation(context.reservation_id, CAPACITY_BLOCK)
    if context.reservation_type == RESERVATION_ODCR:
        return LandingReservation(context.reservation_id, RESERVATION_ODCR)
    return None


def _minutes(delta: timedelta) -> str:
    """``59 min 30 s``; negative when the block reclaims its instances before a replacement is up."""
    seconds = int(delta.total_seconds())
    minutes, rest = divmod(abs(seconds), 60)
    return f"{'-' if seconds < 0 else ''}{minutes} min" + (f" {rest} s" if rest else "")


def read_capacity(state: WorkflowState, ec2: CapacityPort, now: datetime) -> dict[str, Any]:
    """The ``read-capacity`` step: how the admitted instance was bought, and the admission with its
    decision revised by the capacity rules (D12).

    It runs after admit proceeds to replace, before the cordon, and answers the admission itself
    (``$.admission``), so the steps after read the decision where admit left it. What the rules
    read and decided is kept beside it under ``capacity`` for the record and the notification. An
    instance EC2 no longer knows leaves the decision as it is: the terminate step finds it gone.
    """
    admission = dict(state.step("admission") or {})
    raw_decision = admission.get("decision")
    admitted = state.admitted_node
    if admission.get("verdict") != PROCEED or raw_decision is None or admitted is None:
        raise InvalidEventError("read-capacity runs only after an admission that proceeds with a decision")
    decision = Decision.from_json(raw_decision)
    instance = ec2.describe(admitted.instance_id) if admitted.instance_id else None
    if instance is None:
        return {
            **admission,
            "capacity": {
                "read": False,
                "note": f"EC2 does not know instance {admitted.instance_id or '(none)'}: capacity not read",
                "at": format_timestamp(now),
            },
        }
    reservation_id = instance.capacity_reservation_id
    reservation = ec2.capacity_reservation(reservation_id) if reservation_id else None
    context = CapacityContext(
        lifecycle=instance.lifecycle,
        reservation_id=reservation_id,
        reservation_type=reservation.reservation_type if reservation is not None else "",
        reservation_end=reservation.end_date if reservation is not None else None,
        instance_type=instance.instance_type or admitted.instance_type,
        image_id=instance.image_id,
    )
    verdict = revise_for_capacity(
        decision,
        context,
        pool=admitted.pool or None,
        replace=state.settings.replace,
        drain_worst_case_seconds=drain_worst_case_seconds(state.settings),
        now=now,
    )
    capacity: dict[str, Any] = {
        "read": True,
        "context": context.to_json(),
        "verdict": verdict.to_json(),
        "at": format_timestamp(now),
    }
    if reservation is not None:
        capacity["reservation"] = {
            "state": reservation.state,
            "availableInstanceCount": reservation.available_instance_count,
            "totalInstanceCount": reservation.total_instance_count,
        }
    elif reservation_id:
        capacity["note"] = f"reservation {reservation_id} not found in EC2"
    return {**admission, "decision": verdict.revise(decision).to_json(), "capacity": capacity}


def block_note_at_escalation(state: WorkflowState, now: datetime) -> str:
    """Rule 1 again when a reboot turns into a replacement after the cordon (the reboot found a
    worse fault, or the node did not recover): "" when the replacement may go ahead, else why it
    is deferred for capacity.

    Admit's read judged a reboot, which gives no capacity up. The drain is over by now, so what is
    left before a replacement takes pods is ``replace.launchMinutes``; the block's end and lead
    are the ones the read recorded."""
    capacity = (state.step("admission") or {}).get("capacity") or {}
    if not capacity.get("read"):
        return ""
    context = CapacityContext.from_json(capacity.get("context") or {})
    usable_until = block_usable_until(context)
    if not context.in_capacity_block or usable_until is None or context.reservation_end is None:
        return ""
    replace = state.settings.replace
    remaining = usable_until - replacement_ready_by(
        now, drain_worst_case_seconds=0, launch_minutes=replace.launch_minutes
    )
    if remaining >= timedelta(minutes=replace.min_block_remaining_minutes):
        return ""
    return (
        f"deferred for capacity: Capacity Block {context.reservation_id or '(id unknown)'} ends at "
        f"{format_timestamp(context.reservation_end)} and a replacement would take pods with "
        f"{_minutes(remaining)} left before the block reclaims it, under "
        f"replace.minBlockRemainingMinutes={replace.min_block_remaining_minutes}. The node stays cordoned "
        "and is not replaced"
    )
