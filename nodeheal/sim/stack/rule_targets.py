"""EventBridge rule targets, played locally: moto matches events against the template's rule
patterns and delivers them to SQS probe queues; the pump hands each to the function the rule
targets in the template, with Lambda's asynchronous retry semantics."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class RuleHarness(Protocol):
    """What the pump needs of the local AWS harness (:class:`~nodeheal.sim.local_aws.LocalAws`,
    which starts the pump and so cannot be imported here)."""

    #: Rule name -> the SQS queue URL of the probe target that sees what the rule matched.
    rule_probes: dict[str, str]
    #: Rule name -> the logical ID of the function the rule targets.
    rule_targets: dict[str, str]

    def client(self, service: str) -> Any: ...
    def call_handler(self, logical_id: str, payload: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event a rule matched and its target handed to the ingest function."""

    rule: str
    envelope: Mapping[str, Any]
    #: What ingest answered; empty when it raised on every attempt.
    result: Mapping[str, Any]
    error: str
    attempts: int
    at: float  # time.monotonic() when the target received it


class RuleTargetPump:
    """Plays the rules' Lambda targets: reads each rule's probe queue and invokes the function the
    rule targets in the template.

    EventBridge invokes its Lambda target asynchronously and Lambda retries a failed invocation
    twice before giving up (to the function's failure destination); the pump does the same, and
    keeps every delivery for the timeline and the tests.
    """

    #: Lambda's own retries of a failed asynchronous invocation (the stack sets its maximum).
    ATTEMPTS = 3

    def __init__(self, local: RuleHarness, *, poll_seconds: float = 0.01) -> None:
        self._local = local
        self._sqs = local.client("sqs")
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self._busy = False
        #: Called in the pump's thread with each delivery, after ingest answered.
        self.on_delivery: list[Callable[[Delivery], None]] = []
        #: Called in the pump's thread when a matched event arrives, before ingest runs.
        self.on_matched: list[Callable[[str, Mapping[str, Any]], None]] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rule-target", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)

    def idle(self) -> bool:
        """Nothing queued in any probe and nothing being delivered right now."""
        with self._lock:
            if self._busy:
                return False
        for url in self._local.rule_probes.values():
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            if int(attributes["ApproximateNumberOfMessages"]) or int(
                attributes["ApproximateNumberOfMessagesNotVisible"]
            ):
                return False
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            delivered = 0
            for rule, url in self._local.rule_probes.items():
                delivered += self._drain(rule, url)
            if not delivered:
                self._stop.wait(self._poll_seconds)

    def _drain(self, rule: str, url: str) -> int:
        messages = self._sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return 0
        with self._lock:
            self._busy = True
        try:
            for message in messages:
                envelope = json.loads(message["Body"])
                received = time.monotonic()
                for listener in list(self.on_matched):
                    listener(rule, envelope)
                delivery = self._deliver(rule, envelope, received)
                with self._lock:
                    self._deliveries.append(delivery)
                for delivered_listener in list(self.on_delivery):
                    delivered_listener(delivery)
                self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return len(messages)
        finally:
            with self._lock:
                self._busy = False

    def _deliver(self, rule: str, envelope: Mapping[str, Any], received: float) -> Delivery:
        error = ""
        for attempt in range(1, self.ATTEMPTS + 1):
            try:
                result = self._local.call_handler(self._local.rule_targets[rule], envelope)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                continue
            return Delivery(rule, envelope, dict(result), "", attempt, received)
        return Delivery(rule, envelope, {}, error, self.ATTEMPTS, received)
