"""The DynamoDB ledger: per-node locks, cluster admission state, remediation records, dropped events.

One table, single-table design (``pk``/``sk`` strings, TTL attribute ``expiresAt`` in epoch seconds,
GSI ``byCluster`` on ``gsi1pk``/``gsi1sk`` for history by cluster and time):

===========================  =======================================  ======================================
item                         pk / sk                                  why
===========================  =======================================  ======================================
per-instance lock            LOCK#<cluster>#<instance> / LOCK         one remediation per node (TTL'd)
cluster admission state      CLUSTER#<cluster> / ADMISSION            budgets, breaker, pause (versioned)
remediation record           INSTANCE#<cluster>#<instance> / REM#...  history per instance; GSI: per cluster
end of an execution          EXECUTION#<cluster>#<name> / END        record + notify exactly once per end
episode memory               EPISODE#<cluster>#<instance> / CONDITION#<type>  worst fault seen (D2, D19)
counted-signal window        SIGNALS#<cluster>#<instance> / SIGNAL#<signal>   occurrences of a Warning Event
re-evaluation counter        REEVALUATION#<cluster> / COUNTER         N of the -r<N> names (D3)
dropped event                DROPPED#<yyyy-mm-dd> / <t>#<id>          why an event started nothing
===========================  =======================================  ======================================

Identity is the EC2 instance, never the node name (docs/architecture.md, D1): EC2 reuses private IPs, so a new
Node can take an old name, and it must not inherit the old instance's lock, reboots, attempt cap or
escalation. Records written by earlier versions under ``NODE#<cluster>#<node>`` keys stay visible
in the per-cluster index (``nodeheal history``) but are never read as an instance's history.

DynamoDB deletes expired items lazily (up to days later), so every read that cares compares
``expiresAt`` with the clock itself instead of trusting the item to be gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from nodeheal.actions import Action
from nodeheal.aws.attribute_values import deserialize_item, serialize_item
from nodeheal.errors import ContendedError, LedgerContentionError, LockNotHeldError, SupersededError
from nodeheal.timestamps import format_timestamp, utc_now
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.locks import LockClaim, LockView
from nodeheal.workflow.records import (
    FINALIZERS,
    DroppedEvent,
    ExecutionEnd,
    RecordWrite,
    RemediationRecord,
)
from nodeheal.workflow.signal_windows import SignalWindow, window_from_item, window_to_item

#: Records are history, not state: kept ~13 months so a year-over-year question has an answer.
RECORD_RETENTION = timedelta(days=400)
DROPPED_RETENTION = timedelta(days=30)
#: A sighting matters only while its instance's episode runs on the same boot; a month bounds
#: the items of instances that went away while bad.
SIGHTING_RETENTION = timedelta(days=30)
BY_CLUSTER_INDEX = "byCluster"


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _is_conditional_failure(error: ClientError) -> bool:
    code: str = error.response.get("Error", {}).get("Code", "")
    return code == "ConditionalCheckFailedException"


@dataclass(frozen=True, slots=True)
class LockResult:
    acquired: bool
    holder: str
    expires_at: datetime | None
    #: The holder's lock as read after a refused acquisition (None when acquired, or gone meanwhile).
    held_by: LockView | None = None
    #: When acquired: the lock another execution held until its TTL ran out, which this one took.
    lapsed: LockView | None = None


class Ledger:
    """Typed access to the ledger table; the DynamoDB client is injected."""

    def __init__(self, client: Any, table_name: str, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._client = client
        self._table = table_name
        self._clock = clock

    def _put_if(self, item: dict[str, Any], condition: str, values: dict[str, Any]) -> bool:
        """PutItem of ``item`` only where ``condition`` holds; False when it did not."""
        try:
            self._client.put_item(
                TableName=self._table,
                Item=serialize_item(item),
                ConditionExpression=condition,
                ExpressionAttributeValues=serialize_item(values),
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                return False
            raise
        return True

    # -- per-instance locks ----------------------------------------------------------------------
    #
    # ``subject`` is the identity key of the admitted node (its EC2 instance ID; see
    # nodeheal.workflow.state.identity_key), never its name.

    @staticmethod
    def _lock_key(cluster: str, subject: str) -> dict[str, Any]:
        return serialize_item({"pk": f"LOCK#{cluster}#{subject}", "sk": "LOCK"})

    def _lock_item(
        self, cluster: str, subject: str, execution: str, ttl: timedelta, claim: LockClaim | None
    ) -> dict[str, Any]:
        now = self._clock()
        item: dict[str, Any] = {
            "pk": f"LOCK#{cluster}#{subject}",
            "sk": "LOCK",
            "execution": execution,
            "acquiredAt": format_timestamp(now, millis=True),
            "expiresAt": _epoch(now + ttl),
            "mutated": False,
        }
        if claim is not None:
            item |= {
                "node": claim.node,
                "conditionType": claim.condition_type,
                "action": claim.action.value,
                "actsAt": _epoch(claim.acts_at),
            }
        return item

    def acquire_lock(
        self,
        cluster: str,
        subject: str,
        execution: str,
        ttl: timedelta,
        claim: LockClaim | None = None,
    ) -> LockResult:
        """Take the lock, or renew it if this execution holds it already (a re-run of admit).

        A renewal keeps ``mutated``: an execution that has mutated the node stays un-preemptable
        by a less severe newcomer however often its admit re-runs.
        """
        now = self._clock()
        holder = self.read_lock(cluster, subject)
        if holder is not None and holder.execution == execution:
            return self._renew(cluster, subject, execution, ttl, claim, holder)
        item = self._lock_item(cluster, subject, execution, ttl, claim)
        if holder is not None and holder.condition_type:
            item |= {"lapsedFrom": holder.execution, "lapsedConditionType": holder.condition_type}
        try:
            self._client.put_item(
                TableName=self._table,
                Item=serialize_item(item),
                ConditionExpression="attribute_not_exists(pk) OR expiresAt < :now",
                ExpressionAttributeValues=serialize_item({":now": _epoch(now)}),
            )
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise
            held = self.read_lock(cluster, subject)
            if held is not None and held.execution == execution:
                return LockResult(acquired=True, holder=execution, expires_at=held.expires_at)
            return LockResult(
                acquired=False,
                holder=held.execution if held else "",
                expires_at=held.expires_at if held else None,
                held_by=held,
            )
        # The write required the item absent or expired: a holder read above had run out its TTL.
        return LockResult(acquired=True, holder=execution, expires_at=now + ttl, lapsed=holder)

    def _renew(
        self,
        cluster: str,
        subject: str,
        execution: str,
        ttl: timedelta,
        claim: LockClaim | None,
        held: LockView,
    ) -> LockResult:
        item = self._lock_item(cluster, subject, execution, ttl, claim)
        item["mutated"] = held.mutated
        if held.busy_until is not None:
            item["busyUntil"] = _epoch(held.busy_until)
        if held.lapsed_from:
            item |= {"lapsedFrom": held.lapsed_from, "lapsedConditionType": held.lapsed_condition_type}
        if held.contended(self._clock()) and held.contender_until is not None:
            # A renewal does not erase a contender that still waits for the node (D2).
            item |= {
                "contender": held.contender,
                "contenderAction": held.contender_action.value,
                "contenderCost": held.contender_action.cost,
                "contenderUntil": _epoch(held.contender_until),
            }
        try:
            self._client.put_item(
                TableName=self._table,
                Item=serialize_item(item),
                ConditionExpression="execution = :execution",
                ExpressionAttributeValues=serialize_item({":execution": execution}),
            )
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise
            # Preempted between the read and the write: report the new holder.
            taken = self.read_lock(cluster, subject)
            return LockResult(
                acquired=False,
                holder=taken.execution if taken else "",
                expires_at=taken.expires_at if taken else None,
                held_by=taken,
            )
        return LockResult(
            acquired=True, holder=execution, expires_at=self._clock() + ttl, lapsed=held.lapsed_view()
        )

    def preempt_lock(
        self,
        cluster: str,
        subject: str,
        execution: str,
        ttl: timedelta,
        claim: LockClaim,
        *,
        holder: LockView,
        require_unmutated: bool,
    ) -> bool:
        """Take the lock from ``holder`` in one conditional write (D2).

        The write succeeds only if the lock is still exactly ``holder``'s (same execution, same
        expiry: it was not renewed or handed on meanwhile), no mutating step of the holder can
        still be running, and, when ``require_unmutated``, the holder has not mutated the node.
        The holder sees the change at its next step's :meth:`claim_mutation` and stops.
        """
        now = self._clock()
        condition = (
            "execution = :holder AND expiresAt = :holderExpires "
            "AND (attribute_not_exists(busyUntil) OR busyUntil < :now)"
        )
        values: dict[str, Any] = {
            ":holder": holder.execution,
            ":holderExpires": _epoch(holder.expires_at),
            ":now": _epoch(now),
        }
        if require_unmutated:
            condition += " AND mutated = :false"
            values[":false"] = False
        item = self._lock_item(cluster, subject, execution, ttl, claim)
        item["preempted"] = holder.execution
        return self._put_if(item, condition, values)

    def contend(
        self,
        cluster: str,
        subject: str,
        execution: str,
        claim: LockClaim,
        *,
        holder: LockView,
        until: datetime,
    ) -> bool:
        """Tell ``holder`` that a more severe execution waits for the node (D2), in one conditional
        write: only on the same holder, and only over a less severe contender (or none). The holder
        waits at its next :meth:`claim_mutation` (ContendedError, retried), so it does not reboot a
        node a waiting fault calls to replace while its own running step keeps the newcomer from
        preempting it. ``until`` is when the contender will be back: each of its admits renews the
        mark, and a mark past it is stale (the contender ended first) and no longer holds anyone."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._lock_key(cluster, subject),
                UpdateExpression=(
                    "SET contender = :me, contenderAction = :action, contenderCost = :cost, "
                    "contenderUntil = :until"
                ),
                ConditionExpression=(
                    "execution = :holder AND expiresAt = :holderExpires "
                    "AND (attribute_not_exists(contenderCost) OR contenderCost < :cost OR contender = :me)"
                ),
                ExpressionAttributeValues=serialize_item(
                    {
                        ":me": execution,
                        ":action": claim.action.value,
                        ":cost": claim.action.cost,
                        ":until": _epoch(until),
                        ":holder": holder.execution,
                        ":holderExpires": _epoch(holder.expires_at),
                    }
                ),
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                return False
            raise
        return True

    def withdraw_contention(self, cluster: str, subject: str, execution: str) -> bool:
        """Take back this execution's contender mark (it stops without taking the node over): the
        holder then carries on with its own fault instead of stopping for a successor that never
        comes (D2). One conditional write, only while the mark is this execution's."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._lock_key(cluster, subject),
                UpdateExpression="REMOVE contender, contenderAction, contenderCost, contenderUntil",
                ConditionExpression="contender = :me",
                ExpressionAttributeValues=serialize_item({":me": execution}),
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                return False
            raise
        return True

    def claim_mutation(
        self, cluster: str, subject: str, execution: str, *, step: str, busy_for: timedelta
    ) -> None:
        """Prove this execution still holds the lock and mark it as mutating, in one write (D2).

        Every mutating step calls this first. Raises ContendedError while a more severe execution
        waits to take the node over (a fresh contender mark; a stale one is ignored: its contender
        ended first), SupersededError when another execution took the lock (preempted, or the TTL
        expired and someone else took it) and LockNotHeldError when nobody holds it any more.
        """
        now = self._clock()
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._lock_key(cluster, subject),
                UpdateExpression="SET mutated = :true, busyUntil = :busy, lastStep = :step",
                ConditionExpression=(
                    "execution = :execution AND expiresAt > :now "
                    "AND (attribute_not_exists(contender) OR contenderUntil < :now)"
                ),
                ExpressionAttributeValues=serialize_item(
                    {
                        ":true": True,
                        ":busy": _epoch(now + busy_for),
                        ":step": step,
                        ":execution": execution,
                        ":now": _epoch(now),
                    }
                ),
            )
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise
            held = self.read_lock(cluster, subject)
            if held is not None and held.execution == execution and held.contended(now):
                raise ContendedError(
                    f"execution {held.contender} ({held.contender_action.value}) waits to take this node "
                    f"over; {execution} stops before {step} and leaves its cordon to it"
                ) from error
            if held is not None and held.execution != execution and held.expires_at > now:
                raise SupersededError(
                    f"execution {held.execution} took over the remediation of this node "
                    f"({held.condition_type or 'another condition'}: {held.action.value}); "
                    f"{execution} stops before {step} and leaves its cordon to it"
                ) from error
            raise LockNotHeldError(
                f"execution {execution} no longer holds the lock of {subject} (it expired); "
                f"refusing to {step}"
            ) from error

    def lock_holder(self, cluster: str, subject: str) -> str | None:
        held = self.read_lock(cluster, subject)
        if held is None or held.expires_at <= self._clock():
            return None
        return held.execution

    def read_lock(self, cluster: str, subject: str) -> LockView | None:
        """The lock item as stored (possibly expired: DynamoDB deletes expired items lazily)."""
        response = self._client.get_item(
            TableName=self._table, Key=self._lock_key(cluster, subject), ConsistentRead=True
        )
        if "Item" not in response:
            return None
        item = deserialize_item(response["Item"])
        tz = self._clock().tzinfo

        def at(key: str) -> datetime | None:
            value = item.get(key)
            return datetime.fromtimestamp(int(value), tz=tz) if value is not None else None

        return LockView(
            execution=str(item.get("execution", "")),
            expires_at=at("expiresAt") or datetime.fromtimestamp(0, tz=tz),
            node=str(item.get("node", "")),
            condition_type=str(item.get("conditionType", "")),
            action=Action(str(item.get("action", Action.NONE.value))),
            acts_at=at("actsAt"),
            mutated=bool(item.get("mutated", False)),
            busy_until=at("busyUntil"),
            contender=str(item.get("contender", "")),
            contender_action=Action(str(item.get("contenderAction", Action.NONE.value))),
            contender_until=at("contenderUntil"),
            lapsed_from=str(item.get("lapsedFrom", "")),
            lapsed_condition_type=str(item.get("lapsedConditionType", "")),
        )

    def held_locks(self, cluster: str) -> list[tuple[str, LockView]]:
        """Every unexpired lock of a cluster as (subject, lock), for operator tools and tests.

        A scan of the table: never used by the workflow, which always knows its subject.
        """
        now = self._clock()
        prefix = f"LOCK#{cluster}#"
        held: list[tuple[str, LockView]] = []
        paginator = self._client.get_paginator("scan")
        for page in paginator.paginate(
            TableName=self._table,
            ProjectionExpression="pk",
            FilterExpression="begins_with(pk, :prefix)",
            ExpressionAttributeValues=serialize_item({":prefix": prefix}),
        ):
            for raw in page.get("Items", []):
                subject = str(deserialize_item(raw)["pk"]).removeprefix(prefix)
                lock = self.read_lock(cluster, subject)
                if lock is not None and lock.expires_at > now:
                    held.append((subject, lock))
        return held

    def node_lock_holder(self, cluster: str, node: str) -> str | None:
        """The execution holding a lock on whatever instance carries ``node``'s name (for people)."""
        for _, lock in self.held_locks(cluster):
            if lock.node == node:
                return lock.execution
        return None

    def release_lock(self, cluster: str, subject: str, execution: str) -> bool:
        """Release the lock if this execution holds it; never release someone else's."""
        try:
            self._client.delete_item(
                TableName=self._table,
                Key=self._lock_key(cluster, subject),
                ConditionExpression="execution = :execution",
                ExpressionAttributeValues=serialize_item({":execution": execution}),
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                return False
            raise
        return True

    # -- cluster admission state (budgets, breaker, pause) ---------------------------------------

    def read_admission_state(self, cluster: str) -> ClusterAdmissionState:
        response = self._client.get_item(
            TableName=self._table,
            Key=serialize_item({"pk": f"CLUSTER#{cluster}", "sk": "ADMISSION"}),
            ConsistentRead=True,
        )
        if "Item" not in response:
            return ClusterAdmissionState(cluster=cluster)
        item = deserialize_item(response["Item"])
        return ClusterAdmissionState.from_item(cluster, int(item.get("version", 0)), item)

    def write_admission_state(self, state: ClusterAdmissionState) -> ClusterAdmissionState:
        """Write ``state`` if nobody wrote since it was read; raise LedgerContentionError otherwise."""
        item = {
            "pk": f"CLUSTER#{state.cluster}",
            "sk": "ADMISSION",
            "version": state.version + 1,
            "updatedAt": format_timestamp(self._clock(), millis=True),
            **state.to_item(),
        }
        if state.version == 0:
            condition = "attribute_not_exists(pk)"
            values: dict[str, Any] | None = None
        else:
            condition = "version = :version"
            values = serialize_item({":version": state.version})
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Item": serialize_item(item),
            "ConditionExpression": condition,
        }
        if values:
            kwargs["ExpressionAttributeValues"] = values
        try:
            self._client.put_item(**kwargs)
        except ClientError as error:
            if _is_conditional_failure(error):
                raise LedgerContentionError(
                    f"admission state of cluster {state.cluster} changed since version {state.version}"
                ) from error
            raise
        return ClusterAdmissionState.from_item(state.cluster, state.version + 1, state.to_item())

    # -- remediation records ---------------------------------------------------------------------

    @staticmethod
    def _written_by_finalizer() -> tuple[str, dict[str, Any]]:
        """The condition "the stored item was written by a finalizer" and its values."""
        values = {f":finalizer{n}": by for n, by in enumerate(sorted(FINALIZERS))}
        return f"recordedBy IN ({', '.join(values)})", serialize_item(values)

    def put_record(self, record: RemediationRecord) -> RecordWrite:
        """Write (or rewrite, for a retried step) the record of one execution, in one conditional
        write: a finalizer's record never replaces a record step's, which replaces a finalizer's
        (:func:`nodeheal.workflow.records.replaces_record`). Returns what it found there."""
        item = {
            "pk": f"INSTANCE#{record.cluster}#{record.subject}",
            "sk": record.sort_key,
            "gsi1pk": f"CLUSTER#{record.cluster}",
            "gsi1sk": f"{format_timestamp(record.started_at, millis=True)}#{record.node}",
            "expiresAt": _epoch(record.finished_at + RECORD_RETENTION),
            **record.to_item(),
        }
        request: dict[str, Any] = {
            "TableName": self._table,
            "Item": serialize_item(item),
            "ReturnValues": "ALL_OLD",
        }
        if record.recorded_by in FINALIZERS:
            # A record without recordedBy (an earlier version's) is taken as a step's.
            by_finalizer, values = self._written_by_finalizer()
            request |= {
                "ConditionExpression": f"attribute_not_exists(pk) OR {by_finalizer}",
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        try:
            response = self._client.put_item(**request)
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise
            kept = error.response.get("Item")
            return RecordWrite(False, RemediationRecord.from_item(deserialize_item(kept)) if kept else None)
        old = response.get("Attributes")
        return RecordWrite(True, RemediationRecord.from_item(deserialize_item(old)) if old else None)

    def instance_records(self, cluster: str, subject: str, since: datetime) -> list[RemediationRecord]:
        """The history of one instance: what attempt caps and escalation count (D1)."""
        items = self._query(
            KeyConditionExpression="pk = :pk AND sk >= :since",
            ExpressionAttributeValues=serialize_item(
                {
                    ":pk": f"INSTANCE#{cluster}#{subject}",
                    ":since": f"REM#{format_timestamp(since, millis=True)}",
                }
            ),
            ConsistentRead=True,
        )
        return [RemediationRecord.from_item(item) for item in items]

    def node_records(self, cluster: str, node: str, since: datetime) -> list[RemediationRecord]:
        """Every record under a node name, whichever instance it was (for people: ``history``).

        Includes records of earlier versions keyed by name. Never used for decisions: a name may
        have belonged to several instances.
        """
        items = self._query(
            IndexName=BY_CLUSTER_INDEX,
            KeyConditionExpression="gsi1pk = :pk AND gsi1sk >= :since",
            FilterExpression="#node = :node AND recordType = :remediation",
            ExpressionAttributeNames={"#node": "node"},
            ExpressionAttributeValues=serialize_item(
                {
                    ":pk": f"CLUSTER#{cluster}",
                    ":since": format_timestamp(since, millis=True),
                    ":node": node,
                    ":remediation": "remediation",
                }
            ),
        )
        return [RemediationRecord.from_item(item) for item in items]

    # -- the episode memory (D2: severity only rises, across executions) ---------------------------

    @staticmethod
    def _sighting_key(cluster: str, subject: str, condition_type: str) -> dict[str, Any]:
        return serialize_item({"pk": f"EPISODE#{cluster}#{subject}", "sk": f"CONDITION#{condition_type}"})

    def remember_sighting(self, cluster: str, subject: str, sighting: Sighting) -> bool:
        """Keep ``sighting`` as its condition's entry in the instance's memory unless the stored one
        should stay (:meth:`Sighting.replaces`, nodeheal.workflow.episode's table), in one
        conditional write: two executions that saw different messages of one episode both write,
        and the worse stays whatever the order. Returns whether it was kept.

        A conditional PutItem of the whole entry: every attribute of an entry is the sighting's
        (the only other writer, :meth:`clear_sightings`, adds ``clearedAt``, which a kept
        sighting drops), so replacing the item is the update, with no update expression to build."""
        item = sighting.to_item()
        item.pop("clearedAt", None)
        key = {"pk": f"EPISODE#{cluster}#{subject}", "sk": f"CONDITION#{sighting.condition_type}"}
        stored = {**key, **item, "expiresAt": _epoch(sighting.seen_at + SIGHTING_RETENTION)}
        values = {f":{name}": item[name] for name in ("bootId", "nodeUid", "seenAt", "cost")}
        names = {f"#{name}": name for name in ("bootId", "nodeUid", "seenAt", "cost", "clearedAt")}
        # As severe, but confirmed where the stored one was not (absent: written before it was kept).
        now_confirmed = ""
        if sighting.confirmed_when_seen:
            now_confirmed = (
                " OR (#cost = :cost AND (attribute_not_exists(#confirmed) OR #confirmed = :false))"
            )
            values[":false"] = False
            names["#confirmed"] = "confirmed"
        try:
            self._client.put_item(
                TableName=self._table,
                Item=serialize_item(stored),
                ConditionExpression=(
                    "attribute_not_exists(pk) "
                    "OR ((#bootId <> :bootId OR #nodeUid <> :nodeUid) AND #seenAt < :seenAt) "
                    "OR (#bootId = :bootId AND #nodeUid = :nodeUid AND ("
                    "(attribute_exists(#clearedAt) AND #clearedAt < :seenAt) OR "
                    f"(attribute_not_exists(#clearedAt) AND (#cost < :cost{now_confirmed}))))"
                ),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=serialize_item(values),
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                return False
            raise
        return True

    # -- counted-signal windows (nodeheal.workflow.signal_windows) -------------------------------
    #
    # Only the counting function writes them, under a grant of its own: its role may touch no
    # other item of the table (the construct conditions it on dynamodb:LeadingKeys SIGNALS#*).

    @staticmethod
    def signal_window_key(cluster: str, instance_id: str, signal: str) -> dict[str, str]:
        return {"pk": f"SIGNALS#{cluster}#{instance_id}", "sk": f"SIGNAL#{signal}"}

    def read_signal_window(self, cluster: str, instance_id: str, signal: str) -> SignalWindow | None:
        """The window of one instance and signal; None when none is stored or it has expired."""
        response = self._client.get_item(
            TableName=self._table,
            Key=serialize_item(self.signal_window_key(cluster, instance_id, signal)),
            ConsistentRead=True,
        )
        raw = response.get("Item")
        if not raw:
            return None
        item = deserialize_item(raw)
        if int(item.get("expiresAt", 0)) <= _epoch(self._clock()):
            return None  # expired, and DynamoDB deletes lazily: an empty window
        return window_from_item(item)

    def write_signal_window(self, window: SignalWindow, *, expires_at: datetime) -> SignalWindow:
        """Store ``window`` only if the stored item still has ``window.version`` (0: no item, or an
        expired one); the window with its new version. Otherwise LedgerContentionError."""
        written = dataclasses.replace(window, version=window.version + 1)
        item = {
            **self.signal_window_key(window.cluster, window.instance_id, window.signal),
            **window_to_item(written),
            "expiresAt": _epoch(expires_at),
        }
        if window.version == 0:
            condition = "attribute_not_exists(pk) OR expiresAt <= :now"
            values: dict[str, Any] = {":now": _epoch(self._clock())}
        else:
            condition = "version = :version"
            values = {":version": window.version}
        if not self._put_if(item, condition, values):
            raise LedgerContentionError(
                f"the {window.signal} window of {window.instance_id} changed since it was read"
            )
        return written

    def clear_sightings(self, cluster: str, subject: str, sightings: list[Sighting], at: datetime) -> int:
        """End the episode of ``sightings`` (a read at ``at`` saw the node healthy, D19): mark each
        ``clearedAt``, one conditional write each, only while it is as it was read (same object,
        boot and ``seenAt``, not cleared): a sighting written since by a later read stays. Returns
        how many were marked."""
        marked = 0
        stamp = format_timestamp(at, millis=True)
        for sighting in sightings:
            try:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._sighting_key(cluster, subject, sighting.condition_type),
                    UpdateExpression="SET #clearedAt = :at",
                    ConditionExpression=(
                        "#nodeUid = :nodeUid AND #bootId = :bootId AND #seenAt = :seenAt "
                        "AND attribute_not_exists(#clearedAt)"
                    ),
                    ExpressionAttributeNames={
                        "#clearedAt": "clearedAt",
                        "#nodeUid": "nodeUid",
                        "#bootId": "bootId",
                        "#seenAt": "seenAt",
                    },
                    ExpressionAttributeValues=serialize_item(
                        {
                            ":at": stamp,
                            ":nodeUid": sighting.node_uid,
                            ":bootId": sighting.boot_id,
                            ":seenAt": format_timestamp(sighting.seen_at, millis=True),
                        }
                    ),
                )
            except ClientError as error:
                if _is_conditional_failure(error):
                    continue
                raise
            marked += 1
        return marked

    def sightings(self, cluster: str, subject: str) -> list[Sighting]:
        """The instance's remembered sightings, one per condition type (stale ones included: the
        reader checks each against the live node, :func:`nodeheal.workflow.episode.still_describes`)."""
        items = self._query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=serialize_item({":pk": f"EPISODE#{cluster}#{subject}"}),
            ConsistentRead=True,
        )
        return [Sighting.from_item(item) for item in items]

    # -- the end of an execution (Record, Record failure, the finalizer and the sweeper) ---------

    @staticmethod
    def _end_key(cluster: str, execution: str) -> dict[str, Any]:
        return serialize_item({"pk": f"EXECUTION#{cluster}#{execution}", "sk": "END"})

    def execution_ended(self, cluster: str, execution: str) -> bool:
        """Whether an end of this execution was recorded and its notification sent."""
        return self.execution_end(cluster, execution) is not None

    def execution_end(self, cluster: str, execution: str) -> ExecutionEnd | None:
        """This execution's end marker: the outcome recorded and who recorded it (None: not ended)."""
        response = self._client.get_item(
            TableName=self._table, Key=self._end_key(cluster, execution), ConsistentRead=True
        )
        if "Item" not in response:
            return None
        item = deserialize_item(response["Item"])
        return ExecutionEnd(outcome=str(item.get("outcome", "")), by=str(item.get("recordedBy", "")))

    def mark_execution_ended(self, cluster: str, execution: str, outcome: str, by: str) -> None:
        """Remember that this execution's end was recorded and notified: the first end stands,
        except that a record step's replaces a finalizer's with its own record's outcome
        (:func:`nodeheal.workflow.records.replaces_end`), in one conditional write."""
        now = self._clock()
        item = {
            "pk": f"EXECUTION#{cluster}#{execution}",
            "sk": "END",
            "outcome": outcome,
            "recordedBy": by,
            "at": format_timestamp(now, millis=True),
            "expiresAt": _epoch(now + RECORD_RETENTION),
        }
        request: dict[str, Any] = {
            "TableName": self._table,
            "Item": serialize_item(item),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        if by not in FINALIZERS:
            by_finalizer, values = self._written_by_finalizer()
            request["ConditionExpression"] += f" OR {by_finalizer}"
            request["ExpressionAttributeValues"] = values
        try:
            self._client.put_item(**request)
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise

    def cluster_records(
        self, cluster: str, since: datetime, *, limit: int | None = None
    ) -> list[RemediationRecord]:
        """Records of a cluster, newest first."""
        query: dict[str, Any] = {
            "IndexName": BY_CLUSTER_INDEX,
            "KeyConditionExpression": "gsi1pk = :pk AND gsi1sk >= :since",
            "ExpressionAttributeValues": serialize_item(
                {":pk": f"CLUSTER#{cluster}", ":since": format_timestamp(since, millis=True)}
            ),
            "ScanIndexForward": False,
        }
        records = []
        for item in self._query(**query):
            records.append(RemediationRecord.from_item(item))
            if limit is not None and len(records) >= limit:
                break
        return records

    def find_record(self, cluster: str, execution: str) -> RemediationRecord | None:
        """The record of one execution (operator lookups; reads the cluster's index partition)."""
        items = self._query(
            IndexName=BY_CLUSTER_INDEX,
            KeyConditionExpression="gsi1pk = :pk",
            FilterExpression="#execution = :execution",
            ExpressionAttributeNames={"#execution": "execution"},
            ExpressionAttributeValues=serialize_item({":pk": f"CLUSTER#{cluster}", ":execution": execution}),
        )
        for item in items:
            return RemediationRecord.from_item(item)
        return None

    def known_clusters(self) -> list[str]:
        """Every cluster with remediation records or admission state, sorted.

        A keys-only scan of the whole table: meant for operator tools run by hand, never for the
        workflow (which always knows its cluster).
        """
        clusters: set[str] = set()
        paginator = self._client.get_paginator("scan")
        for page in paginator.paginate(
            TableName=self._table,
            ProjectionExpression="pk, gsi1pk",
            FilterExpression="begins_with(pk, :cluster) OR begins_with(gsi1pk, :cluster)",
            ExpressionAttributeValues=serialize_item({":cluster": "CLUSTER#"}),
        ):
            for raw in page.get("Items", []):
                item = deserialize_item(raw)
                for key in ("pk", "gsi1pk"):
                    value = str(item.get(key, ""))
                    if value.startswith("CLUSTER#"):
                        clusters.add(value.removeprefix("CLUSTER#"))
        return sorted(clusters)

    # -- operator re-evaluations (D3) --------------------------------------------------------------

    def next_reevaluation(self, cluster: str) -> int:
        """The next number for a person's re-evaluation in ``cluster``: 1, 2, ..., never reused.

        One atomic ADD, so two people resetting at once cannot give two executions one name.
        """
        response = self._client.update_item(
            TableName=self._table,
            Key=serialize_item({"pk": f"REEVALUATION#{cluster}", "sk": "COUNTER"}),
            UpdateExpression="ADD #number :one",
            ExpressionAttributeNames={"#number": "number"},
            ExpressionAttributeValues=serialize_item({":one": 1}),
            ReturnValues="UPDATED_NEW",
        )
        return int(deserialize_item(response["Attributes"])["number"])

    # -- dropped events --------------------------------------------------------------------------

    def put_dropped_event(self, dropped: DroppedEvent) -> None:
        item = {
            "pk": f"DROPPED#{dropped.at.strftime('%Y-%m-%d')}",
            "sk": f"{format_timestamp(dropped.at, millis=True)}#{dropped.event_id}",
            "gsi1pk": "DROPPED",
            "gsi1sk": f"{format_timestamp(dropped.at, millis=True)}#{dropped.event_id}",
            "expiresAt": _epoch(dropped.at + DROPPED_RETENTION),
            **dropped.to_item(),
        }
        self._client.put_item(TableName=self._table, Item=serialize_item(item))

    def dropped_events(self, since: datetime) -> list[DroppedEvent]:
        items = self._query(
            IndexName=BY_CLUSTER_INDEX,
            KeyConditionExpression="gsi1pk = :pk AND gsi1sk >= :since",
            ExpressionAttributeValues=serialize_item(
                {":pk": "DROPPED", ":since": format_timestamp(since, millis=True)}
            ),
            ScanIndexForward=False,
        )
        return [DroppedEvent.from_item(item) for item in items]

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        paginator = self._client.get_paginator("query")
        for page in paginator.paginate(TableName=self._table, **kwargs):
            for item in page.get("Items", []):
                yield deserialize_item(item)
