"""The DynamoDB ledger (nodeheal.aws.ledger) over moto, for the soak's moto-backed sample.

The same schedules then run through the real conditional writes, key schema and index of the
deployed table, not the in-memory contract: what the ledger contract test checks case by case, the
sample checks under seeded interleavings. Every port operation is a scheduling point, as in
:class:`~nodeheal.sim.seeded.memory_ledger.MemoryLedger`; the ``observed_*`` reads are the invariants'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from nodeheal.aws.ledger import Ledger
from nodeheal.errors import LedgerContentionError
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.locks import LockClaim, LockView
from nodeheal.workflow.records import DroppedEvent, ExecutionEnd, RecordWrite, RemediationRecord
from nodeheal.workflow.signal_windows import SignalWindow

TABLE = "nodeheal-ledger"
#: Records are read back from this far before the simulation's start.
_HISTORY = timedelta(days=2)


@contextmanager
def moto_table(table: Mapping[str, Any]) -> Iterator[Any]:
    """A DynamoDB client with the ledger table as the synthesized template declares it (``table``:
    its Properties), in moto, for one schedule."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        request: dict[str, Any] = {
            "TableName": TABLE,
            "KeySchema": table["KeySchema"],
            "AttributeDefinitions": table["AttributeDefinitions"],
            "BillingMode": table.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if table.get("GlobalSecondaryIndexes"):
            request["GlobalSecondaryIndexes"] = table["GlobalSecondaryIndexes"]
        client.create_table(**request)
        yield client


def dynamo_ledger_factory(
    client: Any,
) -> Callable[[Callable[[], datetime], Callable[[str], None]], DynamoLedger]:
    def build(clock: Callable[[], datetime], on_call: Callable[[str], None]) -> DynamoLedger:
        return DynamoLedger(Ledger(client, TABLE, clock=clock), clock, on_call)

    return build


class DynamoLedger:
    def __init__(self, ledger: Ledger, clock: Callable[[], datetime], on_call: Callable[[str], None]) -> None:
        self._ledger = ledger
        self._clock = clock
        self.on_call = on_call

    # -- the port -----------------------------------------------------------------------------

    def acquire_lock(
        self, cluster: str, subject: str, execution: str, ttl: timedelta, claim: LockClaim | None = None
    ) -> Any:
        self.on_call("acquire_lock")
        return self._ledger.acquire_lock(cluster, subject, execution, ttl, claim)

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
        self.on_call("preempt_lock")
        return self._ledger.preempt_lock(
            cluster, subject, execution, ttl, claim, holder=holder, require_unmutated=require_unmutated
        )

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
        self.on_call("contend")
        return self._ledger.contend(cluster, subject, execution, claim, holder=holder, until=until)

    def withdraw_contention(self, cluster: str, subject: str, execution: str) -> bool:
        self.on_call("withdraw_contention")
        return self._ledger.withdraw_contention(cluster, subject, execution)

    def claim_mutation(
        self, cluster: str, subject: str, execution: str, *, step: str, busy_for: timedelta
    ) -> None:
        self.on_call("claim_mutation")
        self._ledger.claim_mutation(cluster, subject, execution, step=step, busy_for=busy_for)

    def lock_holder(self, cluster: str, subject: str) -> str | None:
        self.on_call("lock_holder")
        return self._ledger.lock_holder(cluster, subject)

    def release_lock(self, cluster: str, subject: str, execution: str) -> bool:
        self.on_call("release_lock")
        return self._ledger.release_lock(cluster, subject, execution)

    def read_admission_state(self, cluster: str) -> ClusterAdmissionState:
        self.on_call("read_admission_state")
        return self._ledger.read_admission_state(cluster)

    def write_admission_state(self, state: ClusterAdmissionState) -> ClusterAdmissionState:
        self.on_call("write_admission_state")
        return self._ledger.write_admission_state(state)

    def put_record(self, record: RemediationRecord) -> RecordWrite:
        self.on_call("put_record")
        return self._ledger.put_record(record)

    def instance_records(self, cluster: str, subject: str, since: datetime) -> list[RemediationRecord]:
        self.on_call("instance_records")
        return self._ledger.instance_records(cluster, subject, since)

    def remember_sighting(self, cluster: str, subject: str, sighting: Sighting) -> bool:
        self.on_call("remember_sighting")
        return self._ledger.remember_sighting(cluster, subject, sighting)

    def read_signal_window(self, cluster: str, instance_id: str, signal: str) -> SignalWindow | None:
        self.on_call("read_signal_window")
        return self._ledger.read_signal_window(cluster, instance_id, signal)

    def write_signal_window(self, window: SignalWindow, *, expires_at: datetime) -> SignalWindow:
        self.on_call("write_signal_window")
        return self._ledger.write_signal_window(window, expires_at=expires_at)

    def sightings(self, cluster: str, subject: str) -> list[Sighting]:
        self.on_call("sightings")
        return self._ledger.sightings(cluster, subject)

    def clear_sightings(self, cluster: str, subject: str, sightings: list[Sighting], at: datetime) -> int:
        self.on_call("clear_sightings")
        return self._ledger.clear_sightings(cluster, subject, sightings, at)

    def execution_ended(self, cluster: str, execution: str) -> bool:
        self.on_call("execution_ended")
        return self._ledger.execution_ended(cluster, execution)

    def execution_end(self, cluster: str, execution: str) -> ExecutionEnd | None:
        self.on_call("execution_end")
        return self._ledger.execution_end(cluster, execution)

    def mark_execution_ended(self, cluster: str, execution: str, outcome: str, by: str) -> None:
        self.on_call("mark_execution_ended")
        self._ledger.mark_execution_ended(cluster, execution, outcome, by)

    def put_dropped_event(self, dropped: DroppedEvent) -> None:
        self.on_call("put_dropped_event")
        self._ledger.put_dropped_event(dropped)

    # -- what the simulation reads and a person writes -------------------------------------------

    def observed_state(self, cluster: str) -> ClusterAdmissionState:
        return self._ledger.read_admission_state(cluster)

    def observed_records(self, cluster: str) -> list[RemediationRecord]:
        return self._ledger.cluster_records(cluster, self._clock() - _HISTORY - timedelta(days=365))

    def observed_ended(self, cluster: str, execution: str) -> bool:
        return self._ledger.execution_ended(cluster, execution)

    def observed_end(self, cluster: str, execution: str) -> ExecutionEnd | None:
        return self._ledger.execution_end(cluster, execution)

    def observed_locks(self, cluster: str) -> list[tuple[str, LockView]]:
        return self._ledger.held_locks(cluster)

    def operator_change(
        self, cluster: str, change: Callable[[ClusterAdmissionState], ClusterAdmissionState | None]
    ) -> bool:
        """A person's ``nodeheal pause|resume|breaker reset``, retried on a lost race as the CLI does."""
        for _ in range(5):
            changed = change(self._ledger.read_admission_state(cluster))
            if changed is None:
                return False
            try:
                self._ledger.write_admission_state(changed)
                return True
            except LedgerContentionError:
                continue
        raise LedgerContentionError("the operator's write kept losing races")
