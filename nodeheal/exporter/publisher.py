"""EventBridge publisher: batches, partial failures, jittered retries, per-node order.

``PutEvents`` can succeed as a call and still fail some entries (``FailedEntryCount`` > 0, each
failed entry carrying an ``ErrorCode``). Only the failed entries are retried, after a jittered
exponential backoff, and the batch is finished (every entry delivered or given up) before the next
one is taken, which is what keeps a node's events in order (see :mod:`nodeheal.exporter.queue`).

Retries never give up on a transient failure (throttling, 5xx, network, missing permissions while
someone fixes IAM): during an outage the queue absorbs the events and the overflow policy decides
what to lose. Entries EventBridge refuses as malformed are given up at once; a retry cannot fix them.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from nodeheal.events import MAX_ENTRY_BYTES
from nodeheal.exporter.logs import fields
from nodeheal.exporter.metrics import PUT_ERROR, PUT_OK, PUT_PARTIAL, Metrics
from nodeheal.exporter.queue import EventQueue, QueuedEvent

logger = logging.getLogger(__name__)

#: Per-entry error codes a retry cannot fix: the entry itself is wrong.
PERMANENT_ENTRY_ERRORS = frozenset({"MalformedDetail", "InvalidArgument", "ValidationException"})
#: Call-level error codes a retry cannot fix (the request as built is invalid).
PERMANENT_CALL_ERRORS = frozenset({"ValidationException"})
#: Room left for the envelope (Source, DetailType, bus name, Time) within the 256 KB entry limit.
_ENVELOPE_ALLOWANCE = 2048


class Backoff:
    """Exponential backoff with full jitter (AWS architecture blog: "Exponential Backoff And Jitter").

    Jitter matters here: two replicas restarting together, or many entries throttled together,
    must not retry in lock-step.
    """

    def __init__(self, initial: float, maximum: float, rng: random.Random | None = None) -> None:
        self._initial = initial
        self._maximum = maximum
        self._attempt = 0
        self._rng = rng or random.Random()

    def reset(self) -> None:
        self._attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self._maximum, self._initial * (2**self._attempt))
        self._attempt = min(self._attempt + 1, 32)
        # Never below half the ceiling: "full jitter" can pick ~0 and hammer a throttled API.
        return float(ceiling / 2 + self._rng.uniform(0, ceiling / 2))


def fit_detail(detail: dict[str, Any]) -> str:
    """Serialise a detail, trimming user-controlled parts so the entry stays under 256 KB.

    Labels go first (the well-known ones are already lifted into named fields), then the message
    is cut: the condition's type, status and reason, which decisions rest on, are never touched.
    """
    text = json.dumps(detail, separators=(",", ":"), sort_keys=True)
    limit = MAX_ENTRY_BYTES - _ENVELOPE_ALLOWANCE
    if len(text.encode("utf-8")) <= limit:
        return text
    node = detail.get("node")
    if isinstance(node, dict):
        node["labels"] = {}
        node["labelsTrimmed"] = True
        text = json.dumps(detail, separators=(",", ":"), sort_keys=True)
    condition = detail.get("condition")
    excess = len(text.encode("utf-8")) - limit
    if excess > 0 and isinstance(condition, dict) and isinstance(condition.get("message"), str):
        message = condition["message"].encode("utf-8")
        condition["message"] = message[: max(0, len(message) - excess - 16)].decode("utf-8", "ignore")
        text = json.dumps(detail, separators=(",", ":"), sort_keys=True)
    return text


class EventPublisher:
    def __init__(
        self,
        client: Any,
        *,
        event_bus: str,
        source: str,
        queue: EventQueue,
        metrics: Metrics,
        batch_entries: int = 10,
        batch_bytes: int = 256 * 1024,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        is_active: Callable[[], bool] = lambda: True,
        sleep: Callable[[float], bool] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._bus = event_bus
        self._source = source
        self._queue = queue
        self._metrics = metrics
        self._batch_entries = min(batch_entries, 10)
        self._batch_bytes = min(batch_bytes, 256 * 1024)
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._is_active = is_active
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._rng = rng or random.Random()

    def stop(self) -> None:
        self._stop.set()
        self._queue.wake()

    def run(self) -> None:
        """Publish until :meth:`stop`; the thread target."""
        while not self._stop.is_set():
            batch = self._queue.take_batch(self._batch_entries, self._batch_bytes, timeout=0.5)
            self._metrics.set("queue_depth", len(self._queue))
            if batch:
                self.publish(batch)

    def _entry(self, item: QueuedEvent) -> dict[str, Any]:
        return {
            "Source": self._source,
            "DetailType": item.detail_type,
            "Detail": item.detail,
            "EventBusName": self._bus,
        }

    def publish(self, batch: Sequence[QueuedEvent]) -> int:
        """Deliver one batch; returns how many entries EventBridge accepted.

        Returns early (delivering nothing more) when this replica stops being active: the new
        leader replays what it saw, and two replicas must never ship at once.
        """
        pending = list(batch)
        backoff = Backoff(self._backoff_initial, self._backoff_max, self._rng)
        delivered = 0
        while pending:
            if self._stop.is_set() or not self._is_active():
                logger.info(
                    "publisher inactive; handing %d pending event(s) over", len(pending), extra=fields()
                )
                return delivered
            entries = [self._entry(item) for item in pending]
            started = time.perf_counter()
            try:
                response = self._client.put_events(Entries=entries)
            except ClientError as exc:
                self._metrics.observe_put_events(time.perf_counter() - started, PUT_ERROR)
                code = str(exc.response.get("Error", {}).get("Code", "ClientError"))
                self._metrics.inc("publish_failures_total", len(pending), code=code)
                if code in PERMANENT_CALL_ERRORS:
                    logger.error(
                        "EventBridge rejected the request; dropping %d event(s)",
                        len(pending),
                        extra=fields(code=code, error=str(exc), nodes=[item.key for item in pending]),
                    )
                    self._metrics.inc("events_dropped_total", len(pending), reason="rejected")
                    return delivered
                delay = backoff.next_delay()
                logger.warning(
                    "PutEvents failed; retrying",
                    extra=fields(code=code, error=str(exc), entries=len(pending), retry_in_seconds=delay),
                )
                self._sleep(delay)
                continue
            except BotoCoreError as exc:
                self._metrics.observe_put_events(time.perf_counter() - started, PUT_ERROR)
                self._metrics.inc("publish_failures_total", len(pending), code=type(exc).__name__)
                delay = backoff.next_delay()
                logger.warning(
                    "PutEvents did not complete; retrying",
                    extra=fields(error=str(exc), entries=len(pending), retry_in_seconds=delay),
                )
                self._sleep(delay)
                continue
            results = response.get("Entries") or []
            failed_count = int(response.get("FailedEntryCount") or 0)
            self._metrics.observe_put_events(
                time.perf_counter() - started, PUT_PARTIAL if failed_count else PUT_OK
            )
            retry: list[QueuedEvent] = []
            for index, item in enumerate(pending):
                result = results[index] if index < len(results) else {}
                error_code = result.get("ErrorCode")
                if not error_code and (failed_count == 0 or result.get("EventId")):
                    delivered += 1
                    self._metrics.inc("events_published_total", detail_type=item.detail_type)
                    continue
                code = str(error_code or "Unknown")
                self._metrics.inc("publish_failures_total", code=code)
                if code in PERMANENT_ENTRY_ERRORS:
                    self._metrics.inc("events_dropped_total", reason="rejected")
                    logger.error(
                        "EventBridge rejected an entry; dropping it",
                        extra=fields(code=code, message=result.get("ErrorMessage"), node=item.key),
                    )
                    continue
                retry.append(item)
            if retry:
                delay = backoff.next_delay()
                logger.warning(
                    "EventBridge failed %d of %d entries; retrying those",
                    len(retry),
                    len(pending),
                    extra=fields(retry_in_seconds=delay, nodes=[item.key for item in retry]),
                )
                self._sleep(delay)
            pending = retry
        return delivered
