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

    #: SQS long polling (``WaitTimeSeconds``): a receive waits on the queue until a message
    #: arrives. moto 5.2.5 waits on the queue's condition variable, which sending notifies, so an
    #: idle pump costs one receive per rule per second instead of a hundred (polling every 10 ms
    #: kept half a core busy in every idle pipeline).
    WAIT_SECONDS = 1
    #: The body :meth:`stop` sends to each probe queue to end that rule's long poll at once.
    STOP_BODY = '{"nodeheal-harness": "stop the rule target pump"}'

    def __init__(self, local: RuleHarness) -> None:
        self._local = local
        self._sqs = local.client("sqs")
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self._busy = 0
        #: Called in the rule's pump thread with each delivery, after ingest answered.
        self.on_delivery: list[Callable[[Delivery], None]] = []
        #: Called in the rule's pump thread when a matched event arrives, before ingest runs.
        self.on_matched: list[Callable[[str, Mapping[str, Any]], None]] = []

    def start(self) -> None:
        """One thread per rule, as EventBridge delivers each rule's matches independently."""
        for rule, url in self._local.rule_probes.items():
            thread = threading.Thread(
                target=self._run, args=(rule, url), name=f"rule-target-{rule}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for url in self._local.rule_probes.values():
            self._sqs.send_message(QueueUrl=url, MessageBody=self.STOP_BODY)
        for thread in self._threads:
            thread.join(timeout=10)

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

    def _run(self, rule: str, url: str) -> None:
        while not self._stop.is_set():
            self._drain(rule, url)

    def _drain(self, rule: str, url: str) -> int:
        messages = self._sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=self.WAIT_SECONDS
        ).get("Messages", [])
        if not messages:
            return 0
        with self._lock:
            self._busy += 1
        try:
            for message in messages:
                if message["Body"] == self.STOP_BODY:
                    self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                    continue
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
                self._busy -= 1

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
