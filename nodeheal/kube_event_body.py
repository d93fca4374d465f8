"""What NodeHeal tells the cluster as ``events.k8s.io/v1`` Events, and the exact shape it sends.

An Event is how a controller tells people what it did to an object: ``kubectl describe node`` and
``kubectl get events`` show them. NodeHeal writes them the way client-go's ``tools/events``
recorder writes them (``makeEvent`` in k8s.io/client-go tools/events/event_recorder.go, the recorder
Karpenter's and the scheduler's events come from), so they read like every other controller's:

* the name is ``<regarding name>.<unique suffix>``; client-go's suffix is the clock in hex, NodeHeal's
  is a digest of the execution, the object, the reason and the step's own key, so a step that Step
  Functions runs again writes the same name and the API server answers 409 AlreadyExists instead
  of telling the story twice. A name that would not be a DNS subdomain (a long pod name) falls
  back to a name of the digest alone, as client-go's ``GenerateEventName`` falls back to a UUID;
* the namespace is the regarding object's, or ``default`` for a cluster-scoped Node;
* ``eventTime`` is a MicroTime (six fractional digits); ``reportingController`` names NodeHeal's
  remediation (the exporter never ships Events of this controller back, D10 in docs/architecture.md) and
  ``reportingInstance`` the function that wrote it (``nodeheal-drain``);
* ``action`` and ``reason`` are CamelCase, ``type`` is Normal or Warning, and the ``note`` is at most
  1 KiB and always ends with the execution's name, so a cut never loses it;
* the deprecated core/v1 fields (``deprecatedSource``, ``deprecatedCount``, the timestamps) stay
  unset, as ``ValidateEventCreate`` requires of an Event created through events.k8s.io/v1.

The limits are the API server's (``ReportingInstanceLengthLimit``, ``ActionLengthLimit``,
``ReasonLengthLimit``, ``NoteLengthLimit`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/events.go, which
counts bytes). This module is pure: the API adapter (:mod:`nodeheal.kube.event_writer`) and the
simulation's in-memory one both send :func:`event_body`.
"""

from __future__ import annotations

import enum
import hashlib
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeheal.kube_views import ANNOTATION_EXECUTION, PodView
from nodeheal.payload import cut_text
from nodeheal.timestamps import format_micro_time

#: ``reportingController`` of every Event NodeHeal's remediation writes: a qualified name, as the
#: API server requires. The exporter drops Events of this controller (docs/architecture.md, D10).
REPORTING_CONTROLLER = "nodeheal.io/remediation"
#: ``reportingInstance`` is ``nodeheal-<function>`` (the workflow function, ``nodeheal/rbac.py``).
REPORTING_INSTANCE_PREFIX = "nodeheal-"

#: The API server's limits, in bytes (Go's ``len``).
NOTE_MAX_BYTES = 1024
REASON_MAX_BYTES = 128
ACTION_MAX_BYTES = 128
REPORTING_INSTANCE_MAX_BYTES = 128
#: A DNS subdomain (``NameIsDNSSubdomain``), the rule an Event's name must pass through events.k8s.io/v1.
NAME_MAX_LENGTH = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: Hex digits of the name's suffix: as many as client-go's ``%x`` of a UnixNano.
SUFFIX_HEX_DIGITS = 16
_CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")

NODE_EVENT_NAMESPACE = "default"


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about (``regarding``) or relates to (``related``)."""

    kind: str
    name: str
    uid: str
    namespace: str = ""
    api_version: str = "v1"

    @classmethod
    def node(cls, name: str, uid: str) -> ObjectRef:
        return cls("Node", name, uid)

    @classmethod
    def pod(cls, pod: PodView) -> ObjectRef:
        return cls("Pod", pod.name, pod.uid, namespace=pod.namespace)

    def to_api(self) -> dict[str, str]:
        """An ``ObjectReference``; ``namespace`` only for a namespaced object, as GetReference does."""
        ref = {"kind": self.kind, "name": self.name, "uid": self.uid, "apiVersion": self.api_version}
        if self.namespace:
            ref["namespace"] = self.namespace
        return ref


@dataclass(frozen=True, slots=True)
class ObjectEvent:
    """One thing an execution did (or decided) about one object."""

    regarding: ObjectRef
    type: EventType
    #: CamelCase, why: ``Cordoned``, ``Evicted``, ``DrainTimedOut``.
    reason: str
    #: CamelCase, what was done: ``Cordon``, ``Evict``, ``Terminate``.
    action: str
    #: The human sentence; the execution's name is appended to it.
    note: str
    execution: str
    #: The workflow function that wrote it (``drain``); ``reportingInstance`` is ``nodeheal-drain``.
    function: str
    at: datetime
    related: ObjectRef | None = None
    #: Tells apart Events of one reason in one execution (the drain round's number).
    key: str = ""

    def __post_init__(self) -> None:
        for what, value, limit in (
            ("reason", self.reason, REASON_MAX_BYTES),
            ("action", self.action, ACTION_MAX_BYTES),
        ):
            if not _CAMEL_CASE.fullmatch(value) or len(value.encode()) > limit:
                raise ValueError(f"an Event's {what} must be CamelCase of at most {limit} bytes: {value!r}")
        if not self.execution:
            raise ValueError("an Event of NodeHeal names its execution")

    @property
    def reporting_instance(self) -> str:
        return (REPORTING_INSTANCE_PREFIX + self.function)[:REPORTING_INSTANCE_MAX_BYTES]

    @property
    def namespace(self) -> str:
        """The object's namespace; ``default`` for a cluster-scoped one (client-go's rule)."""
        return self.regarding.namespace or NODE_EVENT_NAMESPACE

    @property
    def name(self) -> str:
        return event_name(self)

    def full_note(self) -> str:
        """The note as sent: the sentence, cut so that the execution's name always fits after it."""
        tail = f" (execution {self.execution})"
        room = NOTE_MAX_BYTES - len(tail.encode())
        return cut_text(self.note, room) + tail


def _digest(event: ObjectEvent) -> str:
    regarding = event.regarding
    identity = "\n".join(
        (event.execution, regarding.kind, regarding.uid, regarding.name, event.reason, event.key)
    )
    return hashlib.sha256(identity.encode()).hexdigest()


def event_name(event: ObjectEvent) -> str:
    """``<regarding name>.<16 hex digits>``, the same for every write of this Event."""
    digest = _digest(event)
    name = f"{event.regarding.name}.{digest[:SUFFIX_HEX_DIGITS]}"
    if len(name) <= NAME_MAX_LENGTH and _DNS_SUBDOMAIN.fullmatch(name):
        return name
    return f"nodeheal.{digest[:32]}"


def event_body(event: ObjectEvent) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event to create."""
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": event.name,
            "namespace": event.namespace,
            # The execution as data, next to the note's sentence: `-o jsonpath` or jq can select on it.
            "annotations": {ANNOTATION_EXECUTION: event.execution},
        },
        "eventTime": format_micro_time(event.at),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": event.reporting_instance,
        "action": event.action,
        "reason": event.reason,
        "note": event.full_note(),
        "type": event.type.value,
        "regarding": event.regarding.to_api(),
    }
    if event.related is not None:
        body["related"] = event.related.to_api()
    return body


def is_nodeheal_event(event: Mapping[str, Any]) -> bool:
    """Whether an Event (core/v1 or events.k8s.io/v1 shape) was written by NodeHeal's remediation."""
    controller = event.get("reportingComponent") or event.get("reportingController") or ""
    return controller == REPORTING_CONTROLLER


@dataclass
class EventTally:
    """What became of the Events of one invocation (or of a container's, until :meth:`take`)."""

    written: int = 0
    #: Already there: an earlier run of the same step wrote it (409 AlreadyExists).
    already: int = 0
    #: Sent and refused, or no answer.
    failed: int = 0
    #: Not sent: the time for Events was spent, or an earlier failure stopped this invocation's writes.
    skipped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, written: int = 0, already: int = 0, failed: int = 0, skipped: int = 0) -> None:
        with self._lock:
            self.written += written
            self.already += already
            self.failed += failed
            self.skipped += skipped

    def take(self) -> EventTally:
        """The counts so far, and start again from zero."""
        with self._lock:
            taken = EventTally(self.written, self.already, self.failed, self.skipped)
            self.written = self.already = self.failed = self.skipped = 0
            return taken
