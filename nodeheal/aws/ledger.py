"""The DynamoDB ledger: per-node locks, cluster admission state, remediation records, dropped events.

One table, single-table design (``pk``/``sk`` strings, TTL attribute ``expiresAt`` in epoch seconds,
GSI ``byCluster`` on ``gsi1pk``/``gsi1sk`` for history by cluster and time):

==========================  ===================================  ==========================================
item                        pk / sk                              why
==========================  ===================================  ==========================================
per-node lock               LOCK#<cluster>#<node> / LOCK         one remediation per node (TTL'd)
cluster admission state     CLUSTER#<cluster> / ADMISSION        budgets, breaker, pause (versioned)
remediation record          NODE#<cluster>#<node> / REM#<t>#<x>  history per node; GSI: per cluster
dropped event               DROPPED#<yyyy-mm-dd> / <t>#<id>      why an event started nothing
==========================  ===================================  ==========================================

DynamoDB deletes expired items lazily (up to days later), so every read that cares compares
``expiresAt`` with the clock itself instead of trusting the item to be gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from nodeheal.errors import LedgerContentionError
from nodeheal.timeutil import format_timestamp, utc_now
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.records import DroppedEvent, RemediationRecord

#: Records are history, not state: kept ~13 months so a year-over-year question has an answer.
RECORD_RETENTION = timedelta(days=400)
DROPPED_RETENTION = timedelta(days=30)
BY_CLUSTER_INDEX = "byCluster"

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {str(k): _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {str(k): _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def serialize_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _serializer.serialize(_to_dynamo(value)) for key, value in item.items()}


def deserialize_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _from_dynamo(_deserializer.deserialize(value)) for key, value in item.items()}


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


class Ledger:
    """Typed access to the ledger table; the DynamoDB client is injected."""

    def __init__(self, client: Any, table_name: str, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._client = client
        self._table = table_name
        self._clock = clock

    # -- per-node locks -------------------------------------------------------------------------

    @staticmethod
    def _lock_key(cluster: str, node: str) -> dict[str, Any]:
        return serialize_item({"pk": f"LOCK#{cluster}#{node}", "sk": "LOCK"})

    def acquire_lock(self, cluster: str, node: str, execution: str, ttl: timedelta) -> LockResult:
        """Take the node's lock, or keep it if this execution holds it already (retried step)."""
        now = self._clock()
        expires = now + ttl
        item = {
            "pk": f"LOCK#{cluster}#{node}",
            "sk": "LOCK",
            "execution": execution,
            "acquiredAt": format_timestamp(now, millis=True),
            "expiresAt": _epoch(expires),
        }
        try:
            self._client.put_item(
                TableName=self._table,
                Item=serialize_item(item),
                ConditionExpression="attribute_not_exists(pk) OR expiresAt < :now OR execution = :execution",
                ExpressionAttributeValues=serialize_item({":now": _epoch(now), ":execution": execution}),
            )
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise
            holder, holder_expires = self._read_lock(cluster, node)
            return LockResult(acquired=False, holder=holder, expires_at=holder_expires)
        return LockResult(acquired=True, holder=execution, expires_at=expires)

    def lock_holder(self, cluster: str, node: str) -> str | None:
        holder, expires = self._read_lock(cluster, node)
        if not holder or expires is None or expires <= self._clock():
            return None
        return holder

    def _read_lock(self, cluster: str, node: str) -> tuple[str, datetime | None]:
        response = self._client.get_item(
            TableName=self._table, Key=self._lock_key(cluster, node), ConsistentRead=True
        )
        if "Item" not in response:
            return "", None
        item = deserialize_item(response["Item"])
        expires = datetime.fromtimestamp(int(item.get("expiresAt", 0)), tz=self._clock().tzinfo)
        return str(item.get("execution", "")), expires

    def release_lock(self, cluster: str, node: str, execution: str) -> bool:
        """Release the lock if this execution holds it; never release someone else's."""
        try:
            self._client.delete_item(
                TableName=self._table,
                Key=self._lock_key(cluster, node),
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

    def put_record(self, record: RemediationRecord) -> None:
        """Write (or rewrite, for a retried step) the record of one execution."""
        item = {
            "pk": f"NODE#{record.cluster}#{record.node}",
            "sk": record.sort_key,
            "gsi1pk": f"CLUSTER#{record.cluster}",
            "gsi1sk": f"{format_timestamp(record.started_at, millis=True)}#{record.node}",
            "expiresAt": _epoch(record.finished_at + RECORD_RETENTION),
            **record.to_item(),
        }
        self._client.put_item(TableName=self._table, Item=serialize_item(item))

    def node_records(self, cluster: str, node: str, since: datetime) -> list[RemediationRecord]:
        items = self._query(
            KeyConditionExpression="pk = :pk AND sk >= :since",
            ExpressionAttributeValues=serialize_item(
                {":pk": f"NODE#{cluster}#{node}", ":since": f"REM#{format_timestamp(since, millis=True)}"}
            ),
            ConsistentRead=True,
        )
        return [RemediationRecord.from_item(item) for item in items]

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
