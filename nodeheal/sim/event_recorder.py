"""How client-go's legacy event recorder turns ``Eventf`` calls into Event writes, as its source does.

node-problem-detector (NPD) reports every problem Event through this recorder: its k8s exporter
calls ``problemclient.Eventf(type, status.Source, reason, message)`` for each event of a status
(``pkg/exporters/k8sexporter/k8s_exporter.go`` ``ExportProblems``, lines 74-85), and the problem
client keeps one recorder per source, each from its own ``record.NewBroadcaster()`` with
``EventSource{Component: source, Host: nodeName}`` and ``StartRecordingToSink``
(``pkg/exporters/k8sexporter/problemclient/problem_client.go`` ``Eventf`` lines 122-130,
``getEventRecorder`` lines 148-154). Every source therefore has its own ``EventCorrelator`` and
its own caches; the object is ``getNodeRef`` (lines 156-164): ``{APIVersion: v1, Kind: Node,
Name: nodeName, Namespace: --event-namespace}``, with **no UID**, and ``--event-namespace``
defaults to "" (``cmd/options/options.go`` line 121), so the Events land in ``default``.

The sources, read for this module (functions and lines are named in each docstring):

* client-go ``v0.35.0`` (commit ``9bcb69436287b966d0c5c195efef00aed921fb1b``), the version NPD
  v1.35.0 to v1.35.2 require in ``go.mod``; ``tools/record/event.go`` and ``events_cache.go`` are
  the same at ``v0.35.4`` (NPD v1.35.3) and differ only in comments and error logging at the
  newest commit read, ``32ce75a7d6bc6960fd048d3d1e3b34185418d8c8``.
* NPD ``v1.35.1`` (``1a5e398d8d666dbbf3891d33a826448f382006de``), the image NodeHeal deploys, and
  what it vendors: ``golang.org/x/time v0.14.0`` (``rate/rate.go``, the token bucket),
  ``k8s.io/utils`` ``v0.0.0-20251222233032-718f0e51e6d2`` (the LRU), ``k8s.io/apimachinery``
  ``v0.35.0`` (``sets.Set.PopAny``) and ``k8s.io/api v0.35.0`` (the Event's JSON names).

One ``Eventf`` goes through, in this order (``events_cache.go`` ``EventCorrelate``, lines 506-516):

1. the aggregator (line 510), which may replace the event by an aggregate one;
2. the event logger (line 511), which raises its cached count and decides create or patch;
3. the spam filter (line 512), whose skip drops the write **after** both caches took the
   occurrence in.

and then ``recordToSink``/``recordEvent`` (``event.go`` lines 288-370) POST a count-1 Event, PATCH
``count``, ``lastTimestamp`` and ``message`` of a repeat, and POST again when the PATCH finds the
Event gone (404).

What this means for a counter of the ``count`` increases of Events per node
------------------------------------------------------------------------------

For one NPD monitor source on one node, every Event of one type (``Warning`` for NPD's problems)
draws on one token bucket, whatever its reason or message (the spam key, :func:`spam_key`). In any
window of ``T`` seconds the API server receives at most::

    writes(T) <= 25 + floor(T * q),   q = float32(1/300) = 0.0033333334 /s

creates and patches together: within ``W`` whole hours at most ``25 + 12 * W``, and ``12 * W`` plus
the tokens left (0 to 25) when the source was already throttled as the window opened. (The float32
makes each token come 7 us early, after 299.9999927 s; that adds one only to a window ending within
microseconds before a multiple of 300 s.) Every reason of that source shares the budget, so one
signal gets at most that many writes, fewer when the source reports others.

Filtered occurrences are **not** lost from the count: the logger's count rose before the filter
ran, so the next occurrence with the same logger key that the filter lets through is written with a
``count`` that includes them (pinned by
``test_a_filtered_occurrence_is_counted_by_the_next_write_of_the_same_event``). The same logger key
is the same message before aggregation, and the one aggregate Event after it. So:

* a counter that counts each write that raises ``count`` as one occurrence sees at most
  ``25 + 12 * W`` occurrences of one signal within ``W`` hours;
* a counter that adds up the increase of ``count`` sees every occurrence of a key up to that key's
  latest accepted write, filtered ones included: no bound but the occurrences themselves, seen in
  at most ``25 + 12 * W`` steps. Only the occurrences after a key's last accepted write are never
  seen: a message that never repeats (an Xid line with its own pid, before aggregation starts),
  a logger entry evicted (4096 keys per source), an NPD restart (the caches live in its memory).

A first occurrence that was filtered leaves the logger pointing at an Event that was never created;
the next accepted occurrence PATCHes it, gets 404 and POSTs it with ``count`` > 1 and the filtered
occurrence's ``firstTimestamp`` (the same happens after the Event's TTL). A counter must therefore
take a new Event's ``count`` as it is, not as 1.

Not modelled: the broadcaster's queue of 1000 (``watch.NewLongQueueBroadcaster(maxQueuedEvents,
watch.DropIfChannelFull)``, ``event.go`` line 194) and the retries after transport errors
(lines 300-323); the Event store here never fails. The correlator runs on its own goroutine with
``clock.RealClock``, slightly after ``makeEvent`` stamped the event; here both read the same
injected clock. A name that is not a DNS subdomain is replaced by a random UUID
(``tools/record/util/util.go`` ``GenerateEventName`` lines 50-57); node names always are one.
"""

from __future__ import annotations

import struct
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

JSON = dict[str, Any]

CLIENT_GO_REPO = "https://github.com/kubernetes/client-go/blob/v0.35.0"
NPD_REPO = "https://github.com/kubernetes/node-problem-detector/blob/v1.35.1"

# events_cache.go lines 35-49.
MAX_LRU_CACHE_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL_SECONDS = 600
SPAM_BURST = 25
#: ``defaultSpamQPS = 1. / 300.`` reaches the limiter as a float32 (``CorrelatorOptions.QPS``,
#: event.go line 69) and then as ``rate.Limit(qps)``, a float64 of that float32.
SPAM_QPS: float = struct.unpack("f", struct.pack("f", 1.0 / 300.0))[0]
#: ``EventAggregatorByReasonMessageFunc`` (events_cache.go lines 181-184).
AGGREGATE_MESSAGE_PREFIX = "(combined from similar events): "
#: ``util.ValidateEventType`` (tools/record/util/util.go lines 31-37).
EVENT_TYPES = frozenset({"Normal", "Warning"})

_NANOS_PER_SECOND = 1_000_000_000
# time.Duration's maximum: what t.Sub(time.Time{}) saturates at, so a limiter never used yet (its
# `last` is the zero time) refills to the full burst (rate.go `advance`, lines 387-401).
_MAX_DURATION_NS = 2**63 - 1

Value = TypeVar("Value")


class LruCache(Generic[Value]):
    """``k8s.io/utils/lru``: groupcache's LRU. ``Get`` and ``Add`` both make a key the newest; an
    ``Add`` past the size evicts the oldest (``internal/third_party/forked/golang/golang-lru/lru.go``
    ``Add`` lines 56-71, ``Get`` lines 74-83)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[str, Value] = OrderedDict()

    def get(self, key: str) -> Value | None:
        if key not in self._entries:
            return None
        self._entries.move_to_end(key)
        return self._entries[key]

    def add(self, key: str, value: Value) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def peek(self, key: str) -> Value | None:
        """The value without making it the newest (for inspection; Go has no such read here)."""
        return self._entries.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class ObjectReference:
    """``v1.ObjectReference``, the Event's ``involvedObject``."""

    name: str
    kind: str = "Node"
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    field_path: str = ""

    def to_json(self) -> JSON:
        # Every field of ObjectReference is omitempty.
        fields = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "apiVersion": self.api_version,
            "fieldPath": self.field_path,
        }
        return {key: value for key, value in fields.items() if value}


def npd_node_reference(node_name: str, event_namespace: str = "") -> ObjectReference:
    """NPD's ``getNodeRef`` (``problem_client.go`` lines 156-164): no UID, the namespace of
    ``--event-namespace`` (default "")."""
    return ObjectReference(name=node_name, namespace=event_namespace)


@dataclass(frozen=True, slots=True)
class EventSource:
    """``v1.EventSource``; NPD's is ``{Component: <monitor source>, Host: <node name>}``."""

    component: str
    host: str


@dataclass(frozen=True, slots=True)
class Event:
    """The ``v1.Event`` the recorder carries through the correlator (times in Unix nanoseconds)."""

    name: str
    namespace: str
    involved: ObjectReference
    type: str
    reason: str
    message: str
    count: int
    first_timestamp_ns: int
    last_timestamp_ns: int
    source: EventSource
    reporting_controller: str
    reporting_instance: str


def make_event(
    source: EventSource, involved: ObjectReference, event_type: str, reason: str, message: str, now_ns: int
) -> Event:
    """``makeEvent`` (``event.go`` lines 484-504) and ``generateEvent`` (lines 439-470): the name is
    ``<object name>.<UnixNano in hex>`` (``util.GenerateEventName``, ``util.go`` lines 50-57), the
    namespace the object's or ``default``, count 1, both timestamps now; then the source, and the
    reporting controller and instance copied from it (lines 452-455)."""
    return Event(
        name=f"{involved.name}.{now_ns:x}",
        namespace=involved.namespace or "default",
        involved=involved,
        type=event_type,
        reason=reason,
        message=message,
        count=1,
        first_timestamp_ns=now_ns,
        last_timestamp_ns=now_ns,
        source=source,
        reporting_controller=source.component,
        reporting_instance=source.host,
    )


# The three keys join their fields with "" as Go's strings.Join(..., "") does, so ("ab", "c") and
# ("a", "bc") collide there too.


def event_key(event: Event) -> str:
    """``getEventKey`` (``events_cache.go`` lines 51-67): source, the whole object reference
    (field path included), type, reason **and message**; the event logger's key."""
    ref = event.involved
    return "".join(
        (
            event.source.component,
            event.source.host,
            ref.kind,
            ref.namespace,
            ref.name,
            ref.field_path,
            ref.uid,
            ref.api_version,
            event.type,
            event.reason,
            event.message,
        )
    )


def spam_key(event: Event) -> str:
    """``getSpamKey`` (``events_cache.go`` lines 69-82): source component and host, the object's
    kind, namespace, name, UID and API version, and the type. **No reason, no message** (and no
    field path): every reason a source reports about a node, of one type, shares one bucket."""
    ref = event.involved
    return "".join(
        (
            event.source.component,
            event.source.host,
            ref.kind,
            ref.namespace,
            ref.name,
            ref.uid,
            ref.api_version,
            event.type,
        )
    )


def aggregate_keys(event: Event) -> tuple[str, str]:
    """``EventAggregatorByReasonFunc`` (``events_cache.go`` lines 159-176): the aggregate key is
    source, object (without field path), type, reason, reporting controller and instance; the
    local key, which tells similar events apart, is the message."""
    ref = event.involved
    aggregate = "".join(
        (
            event.source.component,
            event.source.host,
            ref.kind,
            ref.namespace,
            ref.name,
            ref.uid,
            ref.api_version,
            event.type,
            event.reason,
            event.reporting_controller,
            event.reporting_instance,
        )
    )
    return aggregate, event.message


def _go_duration_seconds(nanos: int) -> float:
    """``time.Duration.Seconds``: whole seconds plus the remainder, each as a float64."""
    seconds, remainder = divmod(nanos, _NANOS_PER_SECOND)
    return float(seconds) + float(remainder) / 1e9


class TokenBucket:
    """``flowcontrol.NewTokenBucketPassiveRateLimiterWithClock`` (``util/flowcontrol/throttle.go``
    lines 93-96) over ``rate.NewLimiter(qps, burst)``; ``TryAccept`` is ``AllowN(now, 1)``
    (lines 120-122).

    x/time/rate v0.14.0 (``rate.go``): the bucket starts full (``NewLimiter`` lines 100-106) and
    refills continuously at ``limit`` tokens a second up to ``burst`` (``advance`` lines 387-401).
    ``reserveN`` (lines 337-381) takes a token if the wait for it, ``durationFromTokens`` truncated
    to whole nanoseconds (lines 405-418), is zero; only a granted request moves ``last`` and the
    tokens, so a refused one costs nothing.
    """

    def __init__(self, limit: float, burst: int) -> None:
        self.limit = limit
        self.burst = burst
        self.tokens = float(burst)
        self._last_ns: int | None = None

    def try_accept(self, now_ns: int) -> bool:
        last_ns = self._last_ns
        if last_ns is not None and now_ns < last_ns:
            last_ns = now_ns
        elapsed_ns = _MAX_DURATION_NS if last_ns is None else now_ns - last_ns
        tokens = min(self.tokens + _go_duration_seconds(elapsed_ns) * self.limit, float(self.burst))
        tokens -= 1
        wait_ns = int((-tokens / self.limit) * 1e9) if tokens < 0 else 0
        if self.burst < 1 or wait_ns > 0:
            return False
        self._last_ns = now_ns
        self.tokens = tokens
        return True


class SpamFilter:
    """``EventSourceObjectSpamFilter.Filter`` (``events_cache.go`` lines 126-151): one token bucket
    per :func:`spam_key` (burst 25, refill 1 per 300 s; ``NewEventCorrelatorWithOptions`` lines
    452-471 with ``populateDefaults`` lines 474-503) in an LRU of 4096. True means skip."""

    def __init__(
        self,
        cache_size: int = MAX_LRU_CACHE_ENTRIES,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
    ) -> None:
        self.burst = burst
        self.qps = qps
        self.cache: LruCache[TokenBucket] = LruCache(cache_size)

    def filter(self, event: Event, now_ns: int) -> bool:
        key = spam_key(event)
        bucket = self.cache.get(key) or TokenBucket(self.qps, self.burst)
        skip = not bucket.try_accept(now_ns)
        self.cache.add(key, bucket)
        return skip


@dataclass(slots=True)
class _AggregateRecord:
    """``aggregateRecord`` (lines 222-229). Go copies the struct out of the cache, but its set is a
    map, shared with the cached copy: the ``PopAny`` after ``cache.Add`` shrinks the cached set."""

    local_keys: set[str] = field(default_factory=set)
    #: None is Go's zero time, older than any interval.
    last_timestamp_ns: int | None = None


#: Which message ``PopAny`` drops from a full set. Go returns the first key of a map range, which
#: the runtime randomises; the model takes the smallest by default so a run is reproducible, and a
#: test that depends on the choice passes its own.
PopAny = Callable[[set[str]], str]


class Aggregator:
    """``EventAggregator.EventAggregate`` (``events_cache.go`` lines 238-293).

    Per aggregate key (:func:`aggregate_keys`: source, object, type, reason) it keeps the set of
    messages seen and the time of the last one. A gap of more than 600 s since the **last** event
    of that key (not the first: ``lastTimestamp`` moves on every event, line 265; ``>`` at line
    259, so exactly 600 s still counts) starts a fresh set. When the set reaches 10 messages
    (line 269) the event is replaced by an aggregate one (lines 278-292): name
    ``<object>.<now hex>``, same reason, type and source, message ``(combined from similar events):
    <this message>``, count 1, **no reporting controller or instance**, and the aggregate key as
    the logger key, so every later aggregate is a count+1 patch of that one Event. One message is
    then dropped from the set (``PopAny``, line 274), leaving 9: the next new message is aggregated
    again, while a repeat of a message still in the set is not, and goes to its own Event.
    """

    def __init__(
        self,
        cache_size: int = MAX_LRU_CACHE_ENTRIES,
        max_events: int = AGGREGATE_MAX_EVENTS,
        max_interval_seconds: int = AGGREGATE_INTERVAL_SECONDS,
        pop_any: PopAny = min,
    ) -> None:
        self.max_events = max_events
        self.max_interval_ns = max_interval_seconds * _NANOS_PER_SECOND
        self.pop_any = pop_any
        self.cache: LruCache[_AggregateRecord] = LruCache(cache_size)

    def aggregate(self, event: Event, now_ns: int) -> tuple[Event, str]:
        """The event to record and its logger key."""
        aggregate_key, local_key = aggregate_keys(event)
        record = self.cache.get(aggregate_key) or _AggregateRecord()
        last_ns = record.last_timestamp_ns
        if last_ns is None or now_ns - last_ns > self.max_interval_ns:
            record = _AggregateRecord()
        record.local_keys.add(local_key)
        record.last_timestamp_ns = now_ns
        self.cache.add(aggregate_key, record)
        if len(record.local_keys) < self.max_events:
            return event, event_key(event)
        record.local_keys.discard(self.pop_any(record.local_keys))
        combined = Event(
            name=f"{event.involved.name}.{now_ns:x}",
            namespace=event.namespace,
            involved=event.involved,
            type=event.type,
            reason=event.reason,
            message=AGGREGATE_MESSAGE_PREFIX + event.message,
            count=1,
            first_timestamp_ns=now_ns,
            last_timestamp_ns=now_ns,
            source=event.source,
            reporting_controller="",
            reporting_instance="",
        )
        return combined, aggregate_key


@dataclass(frozen=True, slots=True)
class _Observation:
    """``eventLog`` (lines 295-308)."""

    count: int
    first_timestamp_ns: int
    name: str
    resource_version: str


class EventLogger:
    """``eventLogger`` (``events_cache.go`` lines 310-395), an LRU of 4096 observations.

    ``eventObserve`` (lines 323-366): on a hit (cached count > 0) the event takes the cached name,
    resourceVersion and firstTimestamp and count = cached + 1, and a patch of ``count``,
    ``lastTimestamp`` and ``message`` is prepared (lines 338-353); hit or miss, the event's count
    is written back at once (lines 355-364), before anyone asks whether it will be sent. A miss
    (never seen, or evicted) keeps the new name and count 1: a new Event.
    ``updateState`` (lines 369-383) stores what the server answered under :func:`event_key` of the
    answer; for an aggregate Event that is another key than the aggregate key it was observed under,
    so each write of it takes a second LRU entry.
    """

    def __init__(self, cache_size: int = MAX_LRU_CACHE_ENTRIES) -> None:
        self.cache: LruCache[_Observation] = LruCache(cache_size)

    def observe(self, event: Event, key: str) -> Event:
        last = self.cache.get(key)
        if last is not None and last.count > 0:
            event = replace(
                event, name=last.name, first_timestamp_ns=last.first_timestamp_ns, count=last.count + 1
            )
            resource_version = last.resource_version
        else:
            resource_version = ""
        self.cache.add(key, _Observation(event.count, event.first_timestamp_ns, event.name, resource_version))
        return event

    def update_state(self, stored: StoredEvent) -> None:
        self.cache.add(
            event_key(stored.event),
            _Observation(
                stored.event.count,
                stored.event.first_timestamp_ns,
                stored.event.name,
                stored.resource_version,
            ),
        )

    def count_of(self, key: str) -> int:
        """The cached count for a logger key, 0 when absent (does not touch the LRU order)."""
        observation = self.cache.peek(key)
        return observation.count if observation else 0


class EventCorrelator:
    """``NewEventCorrelatorWithOptions`` with NPD's zero options (``event.go`` line 276;
    ``events_cache.go`` lines 452-503) and ``EventCorrelate`` (lines 506-516): aggregate, observe,
    **then** filter."""

    def __init__(self, pop_any: PopAny = min, cache_size: int = MAX_LRU_CACHE_ENTRIES) -> None:
        self.aggregator = Aggregator(cache_size=cache_size, pop_any=pop_any)
        self.logger = EventLogger(cache_size)
        self.spam_filter = SpamFilter(cache_size)

    def correlate(self, event: Event, now_ns: int) -> tuple[Event, str, bool]:
        """The event to write, its logger key, and whether the write is skipped."""
        aggregated, logger_key = self.aggregator.aggregate(event, now_ns)
        observed = self.logger.observe(aggregated, logger_key)
        return observed, logger_key, self.spam_filter.filter(observed, now_ns)


def _whole_seconds(nanos: int) -> int:
    """A time as metav1.Time carries it over JSON: RFC 3339 with whole seconds, so the server keeps
    no fraction."""
    return nanos - nanos % _NANOS_PER_SECOND


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An Event as the API server holds it."""

    event: Event
    uid: str
    resource_version: str
    creation_timestamp_ns: int

    def to_json(self) -> JSON:
        """The core/v1 Event a GET returns. ``reportingComponent`` and ``reportingInstance`` have no
        omitempty (k8s.io/api v0.35.0 as NPD vendors it, ``core/v1/types.go`` lines 7575, 7579)
        and are the source's component and host, except on an aggregate Event, which the aggregator
        builds without them; the legacy recorder never sets ``eventTime``, which encodes as null."""
        event = self.event
        source = {"component": event.source.component, "host": event.source.host}
        return {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {
                "name": event.name,
                "namespace": event.namespace,
                "uid": self.uid,
                "resourceVersion": self.resource_version,
                "creationTimestamp": rfc3339(self.creation_timestamp_ns),
            },
            "involvedObject": event.involved.to_json(),
            "reason": event.reason,
            "message": event.message,
            "source": {key: value for key, value in source.items() if value},
            "firstTimestamp": rfc3339(event.first_timestamp_ns),
            "lastTimestamp": rfc3339(event.last_timestamp_ns),
            "count": event.count,
            "type": event.type,
            "eventTime": None,
            "reportingComponent": event.reporting_controller,
            "reportingInstance": event.reporting_instance,
        }


def rfc3339(nanos: int) -> str:
    return datetime.fromtimestamp(nanos // _NANOS_PER_SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventSink(Protocol):
    """Where the recorder writes: ``EventSinkImpl``'s create and patch. :class:`EventStore` here;
    the local API server in the pipeline (``nodeheal.sim.cluster.npd_events``)."""

    def create(self, event: Event, now_ns: int) -> StoredEvent | None: ...
    def patch(self, event: Event) -> StoredEvent | None: ...


class EventStore:
    """The API server's Events, as the recorder's sink sees them: a create of a taken name is
    409 AlreadyExists, a patch of a missing one 404. ``EventSinkImpl`` POSTs and PATCHes in the
    event's own namespace (``kubernetes/typed/core/v1/event_expansion.go`` lines 76-88, 137-150,
    216-226). uids and resourceVersions are counted, so a run is reproducible."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], StoredEvent] = {}
        self._writes = 0

    def _next(self) -> int:
        self._writes += 1
        return self._writes

    def create(self, event: Event, now_ns: int) -> StoredEvent | None:
        if (event.namespace, event.name) in self.events:
            return None
        serial = self._next()
        stored = StoredEvent(
            event=replace(
                event,
                first_timestamp_ns=_whole_seconds(event.first_timestamp_ns),
                last_timestamp_ns=_whole_seconds(event.last_timestamp_ns),
            ),
            uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"events/{event.namespace}/{event.name}/{serial}")),
            resource_version=str(serial),
            creation_timestamp_ns=_whole_seconds(now_ns),
        )
        self.events[event.namespace, event.name] = stored
        return stored

    def patch(self, event: Event) -> StoredEvent | None:
        """The strategic merge patch ``eventObserve`` builds (lines 345-352): the diff against a
        copy with count 0, lastTimestamp at the epoch and no message, so exactly ``count``,
        ``lastTimestamp`` and ``message``; the stored firstTimestamp and the rest stay."""
        stored = self.events.get((event.namespace, event.name))
        if stored is None:
            return None
        patched = replace(
            stored,
            event=replace(
                stored.event,
                count=event.count,
                last_timestamp_ns=_whole_seconds(event.last_timestamp_ns),
                message=event.message,
            ),
            resource_version=str(self._next()),
        )
        self.events[event.namespace, event.name] = patched
        return patched

    def delete(self, namespace: str, name: str) -> None:
        """An Event gone from the server: its TTL (``--event-ttl``, 1 h by default) or a delete."""
        self.events.pop((namespace, name), None)

    def objects(self) -> list[JSON]:
        return [stored.to_json() for stored in self.events.values()]


class Action(StrEnum):
    #: POST of a new Event (also after a PATCH that found the Event gone).
    CREATED = "created"
    #: PATCH of count, lastTimestamp and message of an existing Event.
    PATCHED = "patched"
    #: Skipped by the spam filter: nothing sent.
    FILTERED = "filtered"
    #: POST answered 409 AlreadyExists (two events of one object in the same nanosecond); dropped
    #: without updating the logger (``recordEvent`` lines 355-361).
    REJECTED = "rejected"
    #: A type other than Normal or Warning: logged and dropped before the broadcaster
    #: (``generateEvent`` lines 446-449).
    INVALID_TYPE = "invalid type"


@dataclass(frozen=True, slots=True)
class Recording:
    """What one ``Eventf`` did at the API server."""

    action: Action
    #: The Event as the server holds it after the write; None when nothing was written.
    stored: StoredEvent | None = None
    #: For CREATED: the recorder tried a PATCH first and got 404 (``recordEvent`` lines 336-341).
    after_not_found: bool = False
    #: The count the event logger holds for this occurrence's key afterwards, written or not.
    logged_count: int = 0

    def to_json(self) -> JSON | None:
        return self.stored.to_json() if self.stored else None


class LegacyEventRecorder:
    """One ``record.NewBroadcaster()`` with ``NewRecorder(scheme, source)`` and
    ``StartRecordingToSink`` (``event.go`` lines 186-225, 275-281, 426-428): one correlator, one
    source. ``eventf`` is ``Eventf`` followed by ``recordToSink`` (lines 288-324), run at once.

    ``recordEvent`` (lines 330-370): an event whose count is above 1 is PATCHed (line 302 passes
    ``Count > 1``); a PATCH that gets 404, and any count-1 event, is POSTed with an empty
    resourceVersion (lines 336-341); on success the answer goes to ``UpdateState`` (lines 342-346).
    """

    def __init__(
        self,
        source: EventSource,
        store: EventSink,
        clock: Callable[[], int],
        pop_any: PopAny = min,
        cache_size: int = MAX_LRU_CACHE_ENTRIES,
    ) -> None:
        self.source = source
        self.store = store
        self.clock = clock
        self.correlator = EventCorrelator(pop_any=pop_any, cache_size=cache_size)

    def eventf(self, involved: ObjectReference, event_type: str, reason: str, message: str) -> Recording:
        now_ns = self.clock()
        if event_type not in EVENT_TYPES:
            return Recording(Action.INVALID_TYPE)
        event = make_event(self.source, involved, event_type, reason, message, now_ns)
        observed, logger_key, skip = self.correlator.correlate(event, now_ns)
        logged_count = self.correlator.logger.count_of(logger_key)
        if skip:
            return Recording(Action.FILTERED, logged_count=logged_count)
        patch_first = observed.count > 1
        if patch_first:
            patched = self.store.patch(observed)
            if patched is not None:
                self.correlator.logger.update_state(patched)
                return Recording(Action.PATCHED, patched, logged_count=patched.event.count)
        created = self.store.create(observed, now_ns)
        if created is None:
            return Recording(Action.REJECTED, logged_count=logged_count)
        self.correlator.logger.update_state(created)
        return Recording(
            Action.CREATED, created, after_not_found=patch_first, logged_count=created.event.count
        )


class NpdProblemClient:
    """NPD's ``problemclient`` for one node: ``Eventf(type, source, reason, message)`` makes one
    :class:`LegacyEventRecorder` per source on first use (``problem_client.go`` ``Eventf`` lines
    122-130) with ``EventSource{Component: source, Host: nodeName}`` (line 151), about
    :func:`npd_node_reference`."""

    def __init__(
        self,
        node_name: str,
        store: EventSink,
        clock: Callable[[], int],
        event_namespace: str = "",
        pop_any: PopAny = min,
    ) -> None:
        self.node_name = node_name
        self.store = store
        self.clock = clock
        self.pop_any = pop_any
        self.node_ref = npd_node_reference(node_name, event_namespace)
        self.recorders: dict[str, LegacyEventRecorder] = {}

    def eventf(self, event_type: str, source: str, reason: str, message: str) -> Recording:
        recorder = self.recorders.get(source)
        if recorder is None:
            recorder = LegacyEventRecorder(
                EventSource(source, self.node_name), self.store, self.clock, pop_any=self.pop_any
            )
            self.recorders[source] = recorder
        return recorder.eventf(self.node_ref, event_type, reason, message)


@dataclass(slots=True)
class NanoClock:
    """Unix nanoseconds that move only when told: Go's clock resolution, for Event names."""

    now_ns: int = 1_795_000_000 * _NANOS_PER_SECOND

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float = 0.0, nanos: int = 0) -> None:
        self.now_ns += round(seconds * _NANOS_PER_SECOND) + nanos


def watch_stream(recordings: Iterable[Recording]) -> list[tuple[str, JSON]]:
    """The watch events a fake API server sends for these recordings, in order: ``ADDED`` for a
    create, ``MODIFIED`` for a patch; filtered and rejected calls send nothing."""
    kinds = {Action.CREATED: "ADDED", Action.PATCHED: "MODIFIED"}
    return [
        (kinds[recording.action], recording.stored.to_json())
        for recording in recordings
        if recording.stored is not None and recording.action in kinds
    ]


def event_objects(recordings: Iterable[Recording]) -> list[JSON]:
    """The core/v1 Events a fake API server holds after these recordings (each Event as last
    written, in order of creation), for seeding a fake server or a counting function."""
    latest: dict[tuple[str, str], JSON] = {}
    for _, obj in watch_stream(recordings):
        latest[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
    return list(latest.values())
