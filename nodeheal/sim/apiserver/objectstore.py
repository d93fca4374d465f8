"""The generic half of the simulator's object store: CRUD, versions, history and deletion.

One global resourceVersion counter orders every write, as etcd's revision does. History is kept
twice, as on a real control plane:

* etcd's: every revision since the last compaction, so a list can be read as of an older revision
  (the pages after the first of a ``limit``/``continue`` list). kube-apiserver's compactor runs
  every 5 minutes (``--etcd-compaction-interval``) and compacts to the revision it saw on its
  previous run (k8s.io/apiserver ``pkg/storage/etcd3/compact.go``), so a revision stays readable
  for 5 to 10 minutes;
* the watch cache's: a window of recent events per cached resource (:mod:`.watchcache`), which
  serves watches that resume from a resourceVersion. Resources without a watch cache (core/v1
  events, ``DefaultWatchCacheSizes`` in kube-apiserver) are watched from etcd's history instead.

Both run on the store's :class:`~nodeheal.sim.apiserver.clock.Clock`. Pods are deleted gracefully
(deletionTimestamp first, removal when the simulated containers stop and the kubelet sends
its final delete, which a dead kubelet never does), with wall-clock delays multiplied by
`time_scale`.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
import string
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from nodeheal.sim.apiserver import codec, messages, validation, views
from nodeheal.sim.apiserver.clock import Clock, MonotonicClock
from nodeheal.sim.apiserver.codec import copy_json
from nodeheal.sim.apiserver.fielderrors import go_quote, invalid, invalid_error
from nodeheal.sim.apiserver.messages import (
    ETCD_WATCH_TOO_OLD_RESOURCE_VERSION,
    WATCH_CACHE_TOO_OLD_RESOURCE_VERSION,
)
from nodeheal.sim.apiserver.objects import new_uid, rfc3339
from nodeheal.sim.apiserver.patch import json_patch, merge_patch, strategic_merge_patch
from nodeheal.sim.apiserver.resources import BY_KIND, NODECLAIMS, NODES, PDBS, PODS, RESOURCES, ResourceType
from nodeheal.sim.apiserver.selectors import FieldSelector, LabelSelector
from nodeheal.sim.apiserver.status import (
    STALE_OBJECT,
    already_exists,
    bad_request,
    conflict,
    not_found,
    success_status,
    unsupported_media_type,
)
from nodeheal.sim.apiserver.warning import WarningRecorder
from nodeheal.sim.apiserver.watchcache import ResourceExpiredError, WatchCache, WatchEvent

JSON = dict[str, Any]
Key = tuple[str, str]
HookName = Literal["pod_deleted", "pod_evicted", "node_deleted", "nodeclaim_deleting"]
Hook = Callable[[JSON], None]

#: kube-apiserver's ``--etcd-compaction-interval`` default (5m), in seconds.
COMPACTION_INTERVAL_SECONDS = 300.0

PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)


class CompactedError(Exception):
    """etcd's ``ErrCompacted``: a read at a revision older than the last compaction."""

    def __init__(self, revision: int, compacted: int) -> None:
        super().__init__(f"required revision {revision} has been compacted (compacted at {compacted})")
        self.revision = revision
        self.compacted = compacted


@dataclass(frozen=True)
class Page:
    """One page of a list, as etcd3's ``GetList`` pages it.

    ``last_key`` is the storage key (``namespace/name``, or ``name``) of the last object looked at
    when more keys follow it, which is where the next page starts; ``remaining`` is
    ``remainingItemCount``, reported only for a list without selectors."""

    items: list[JSON]
    resource_version: int
    last_key: str | None
    remaining: int | None


class ObjectStore:
    """Objects, versions, history, hooks and graceful deletion; see ClusterStore for the rest."""

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        clock: Clock | None = None,
        compaction_interval: float = COMPACTION_INTERVAL_SECONDS,
    ) -> None:
        self.time_scale = time_scale
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.compaction_interval = compaction_interval
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        self._objects: dict[str, dict[Key, JSON]] = {r: {} for r in RESOURCES}
        self._rv = 1
        #: The revision of the last change to each resource (a simulated controller that depends on
        #: pods and nodes alone skips a pass when neither changed, whatever else was written).
        self._changed_at: dict[str, int] = {}
        # etcd's history since the last compaction, all resources in revision order.
        self._revisions: deque[WatchEvent] = deque()
        self._compacted_rv = 0
        # The compactor's state (``compact.go``): when it next runs, and the revision it saw last.
        self._next_compaction = self.clock.now() + compaction_interval
        self._compactor_rev = 0
        # Each cached resource's watch cache starts at the store's first revision, as if its
        # cacher had just listed an empty etcd.
        self._watch_caches = {
            plural: WatchCache(self._rv) for plural, rtype in RESOURCES.items() if rtype.watch_cached
        }
        self._scales: dict[tuple[str, str, str], int] = {}
        self._stop_seconds: dict[str, float] = {}
        self._hooks: dict[str, list[Hook]] = {name: [] for name in get_args(HookName)}
        self._pending_hooks: list[tuple[Hook, JSON]] = []
        self._deadlines: list[tuple[float, int, str, str, str]] = []
        #: Uids of the Nodes whose kubelet is dead, and the final deletes each of them owes.
        self._dead_kubelets: dict[str, list[tuple[str, str, str]]] = {}
        self._seq = itertools.count()
        self._reaper: threading.Thread | None = None
        self._closed = False
        # A jump of a manual clock may complete compactions and end watch timeouts: wake waiters.
        self.clock.on_advance(self.notify)

    # ---- versions and history -------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            self._run_compactor()
            return self._rv

    def changed_at(self, *resources: str) -> int:
        """The revision of the last change to any of ``resources`` (0 when none has changed)."""
        with self._lock:
            return max((self._changed_at.get(resource, 0) for resource in resources), default=0)

    @property
    def compacted_revision(self) -> int:
        """Reads at revisions older than this answer etcd's ``ErrCompacted`` (0: never compacted)."""
        with self._lock:
            self._run_compactor()
            return self._compacted_rv

    def _run_compactor(self) -> None:
        """Catch up with the compactor's runs that fell due (``runCompactLoop`` in compact.go).

        Each run writes ``compact_rev_key`` (one more revision), then compacts to the revision its
        previous run saw; the first run only records one. Running lazily, at the next read or
        write, changes nothing anyone can observe: no revision is written between two such runs.
        """
        now = self.clock.now()
        while now >= self._next_compaction:
            self._next_compaction += self.compaction_interval
            self._rv += 1
            if self._compactor_rev:
                self._compact_to(self._compactor_rev)
            self._compactor_rev = self._rv

    def _compact_to(self, revision: int) -> None:
        # etcd's Compact(rev) keeps rev itself and drops everything older.
        self._compacted_rv = max(self._compacted_rv, revision)
        while self._revisions and self._revisions[0].resource_version < self._compacted_rv:
            self._revisions.popleft()

    def compact(self, revision: int | None = None) -> None:
        """Compact etcd to ``revision`` (default: the current one), as its compactor or
        ``etcdctl compaction`` does: older revisions can no longer be read, so their continue
        tokens expire and uncached watches from them answer 410. Watch caches are not touched."""
        with self._lock:
            self._run_compactor()
            self._compact_to(self._rv if revision is None else revision)
            self.changed.notify_all()

    def restart_watch_caches(self) -> None:
        """Every watch cache re-lists at the current revision and starts an empty window, as after
        an apiserver restart (``watchCache.Replace``): a watch from any earlier version is 410."""
        with self._lock:
            self._run_compactor()
            for cache in self._watch_caches.values():
                cache.replace(self._rv)
            self.changed.notify_all()

    def watch_window_start(self, resource: str) -> int:
        """The oldest resourceVersion a watch of ``resource`` may resume from."""
        with self._lock:
            self._run_compactor()
            cache = self._watch_caches.get(resource)
            if cache is not None:
                return cache.oldest_deliverable()
            # etcd serves a watch from R by watching from R + 1, which must not be compacted.
            return max(self._compacted_rv - 1, 0)

    def events_after(self, resource_version: int, resource: str) -> tuple[list[WatchEvent], int]:
        """Events of ``resource`` newer than ``resource_version``, and the version they reach.

        From the resource's watch cache, or etcd's history for a resource without one; raises
        :class:`ResourceExpiredError` with the real server's message if that history is gone."""
        with self._lock:
            self._run_compactor()
            cache = self._watch_caches.get(resource)
            if cache is not None:
                return cache.since(resource_version), self._rv
            if resource_version + 1 < self._compacted_rv:
                raise ResourceExpiredError(ETCD_WATCH_TOO_OLD_RESOURCE_VERSION)
            events: list[WatchEvent] = []
            for event in reversed(self._revisions):
                if event.resource_version <= resource_version:
                    break
                if event.resource == resource:
                    events.append(event)
            events.reverse()
            return events, self._rv

    def expired_message(self, resource: str, resource_version: int) -> str:
        """The message of a 410 for a watch of ``resource`` whose version just fell out of history."""
        with self._lock:
            if resource in self._watch_caches:
                oldest = max(self.watch_window_start(resource), resource_version + 1)
                return WATCH_CACHE_TOO_OLD_RESOURCE_VERSION.format(requested=resource_version, oldest=oldest)
            return ETCD_WATCH_TOO_OLD_RESOURCE_VERSION

    def notify(self) -> None:
        with self._lock:
            self.changed.notify_all()

    def _record(self, rtype: ResourceType, kind: str, obj: JSON, previous: JSON | None) -> None:
        self._changed_at[rtype.plural] = self._rv
        event = WatchEvent(self._rv, rtype.plural, kind, copy_json(obj), previous)
        self._revisions.append(event)
        cache = self._watch_caches.get(rtype.plural)
        if cache is not None:
            cache.add(event, self.clock.now())
        self.changed.notify_all()

    def _bump(self, obj: JSON) -> None:
        self._run_compactor()
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    # ---- hooks -------------------------------------------------------------------------------

    def on(self, event: HookName, callback: Hook) -> None:
        """Call `callback(object)` after a pod is removed, a pod is evicted, a node is removed or a
        NodeClaim is marked for deletion (its finalizer holds it)."""
        with self._lock:
            self._hooks[event].append(callback)

    def _fire(self, event: HookName, obj: JSON) -> None:
        for callback in self._hooks[event]:
            self._pending_hooks.append((callback, copy_json(obj)))

    def _run_hooks(self) -> None:
        while True:
            with self._lock:
                if not self._pending_hooks:
                    return
                callback, obj = self._pending_hooks.pop(0)
            callback(obj)

    # ---- reads -------------------------------------------------------------------------------

    @staticmethod
    def _rtype(resource: str | ResourceType) -> ResourceType:
        """A stored resource by plural, or the served resource (a view included) itself."""
        if isinstance(resource, ResourceType):
            return resource
        if resource not in RESOURCES:
            raise KeyError(f"unknown resource {resource!r}")
        return RESOURCES[resource]

    def _key(self, rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rtype.namespaced else "", name)

    def _present(self, rtype: ResourceType, obj: JSON) -> JSON:
        """The stored object as ``rtype`` serves it: with what the served form adds to the
        stored one (:meth:`_as_served`), converted to the view's version if ``rtype`` is one."""
        return views.from_storage(rtype, self._as_served(rtype.stored, obj))

    def _as_served(self, rtype: ResourceType, obj: JSON) -> JSON:
        """A copy of the stored object as its own resource serves it; ClusterStore adds the
        status controllers maintain."""
        return copy_json(obj)

    def _stored(self, rtype: ResourceType, name: str, namespace: str | None) -> JSON:
        obj = self._objects[rtype.plural].get(self._key(rtype, namespace, name))
        if obj is None:
            raise not_found(rtype.plural, rtype.group, name)
        return obj

    def get(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> JSON:
        rtype = self._rtype(resource)
        with self._lock:
            return self._present(rtype, self._stored(rtype, name, namespace))

    @staticmethod
    def _storage_key(rtype: ResourceType, key: Key) -> str:
        """The object's etcd key below the resource's prefix: ``namespace/name`` or ``name``.
        Lists come back in the order of these keys, as etcd ranges over them."""
        namespace, name = key
        return f"{namespace}/{name}" if rtype.namespaced else name

    @staticmethod
    def _selected(
        obj: JSON, label_selector: LabelSelector | None, field_selector: FieldSelector | None
    ) -> bool:
        return (label_selector is None or label_selector.matches(obj["metadata"].get("labels"))) and (
            field_selector is None or field_selector.matches(obj)
        )

    def list_objects(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        label_selector: LabelSelector | None = None,
        field_selector: FieldSelector | None = None,
    ) -> tuple[list[JSON], int]:
        """Matching objects in storage-key order, and the store's resourceVersion."""
        rtype = self._rtype(resource)
        with self._lock:
            self._run_compactor()
            items = [
                self._present(rtype, obj)
                for key, obj in sorted(
                    self._objects[rtype.plural].items(), key=lambda kv: self._storage_key(rtype, kv[0])
                )
                if (namespace is None or key[0] == namespace)
                and self._selected(obj, label_selector, field_selector)
            ]
            return items, self._rv

    def list_page(
        self,
        resource: str | ResourceType,
        namespace: str | None,
        label_selector: LabelSelector | None,
        field_selector: FieldSelector | None,
        *,
        limit: int,
        start_key: str = "",
        revision: int | None = None,
    ) -> Page:
        """One page of a list, read at ``revision`` (None: the latest) from ``start_key`` on.

        Follows etcd3 ``store.GetList`` (k8s.io/apiserver pkg/storage/etcd3/store.go, v0.33.1):
        objects are taken in key order until ``limit`` of them matched the selectors; the list
        has more when any key follows the last one looked at, matching or not; and
        ``remainingItemCount`` (``PrepareContinueToken`` in pkg/storage/continue.go) is the
        number of keys from the page's start less ``limit``, given only without selectors.
        Raises :class:`CompactedError` for a revision etcd no longer has.
        """
        rtype = self._rtype(resource)
        prefix = f"{namespace}/" if rtype.namespaced and namespace is not None else ""
        start = max(start_key, prefix)
        with self._lock:
            self._run_compactor()
            if revision is None:
                revision, objects = self._rv, self._objects[rtype.plural]
            else:
                objects = self._objects_at(rtype, revision)
            in_range = sorted(
                (skey, obj)
                for skey, obj in ((self._storage_key(rtype, key), obj) for key, obj in objects.items())
                if skey.startswith(prefix) and skey >= start
            )
            items: list[JSON] = []
            last_key: str | None = None
            has_more = False
            for skey, obj in in_range:
                if limit > 0 and len(items) >= limit:
                    has_more = True
                    break
                last_key = skey
                if self._selected(obj, label_selector, field_selector):
                    items.append(self._present(rtype, obj))
            unfiltered = label_selector is None and field_selector is None
            return Page(
                items=items,
                resource_version=revision,
                last_key=last_key if has_more else None,
                remaining=len(in_range) - limit if has_more and unfiltered else None,
            )

    def _objects_at(self, rtype: ResourceType, revision: int) -> dict[Key, JSON]:
        """The resource's objects as of ``revision`` (etcd's ``WithRev`` read): today's, with every
        later change undone."""
        if revision < self._compacted_rv:
            raise CompactedError(revision, self._compacted_rv)
        objects = dict(self._objects[rtype.plural])
        for event in reversed(self._revisions):
            if event.resource_version <= revision:
                break
            if event.resource != rtype.plural:
                continue
            meta = event.object["metadata"]
            key = self._key(rtype, meta.get("namespace"), meta["name"])
            if event.previous is None:
                objects.pop(key, None)
            else:
                objects[key] = event.previous
        return objects

    def select(
        self, resource: str | ResourceType, predicate: Callable[[JSON], bool], namespace: str | None = None
    ) -> list[JSON]:
        """Objects for which ``predicate`` (given the stored object, which it must not change)
        holds, ordered by namespace/name; only the matches are copied."""
        rtype = self._rtype(resource)
        with self._lock:
            # Only the matches are sorted: a thousand-node cluster's pods are scanned on every tick.
            matches = sorted(
                (key, obj)
                for key, obj in self._objects[rtype.plural].items()
                if (namespace is None or key[0] == namespace) and predicate(obj)
            )
            return [self._present(rtype, obj) for _, obj in matches]

    def present(self, resource: str | ResourceType, obj: JSON) -> JSON:
        """An object as the API would serve it (PDBs get their live status)."""
        rtype = self._rtype(resource)
        with self._lock:
            return self._present(rtype, obj)

    # ---- writes ------------------------------------------------------------------------------

    def create(
        self, resource: str | ResourceType, obj: JSON, namespace: str | None = None, *, dry_run: bool = False
    ) -> JSON:
        rtype = self._rtype(resource)
        new = views.to_storage(rtype, copy_json(obj))
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rtype.namespaced:
            ns = namespace or meta.get("namespace")
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            if not ns:
                raise bad_request("the server could not find the requested resource")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        with self._lock:
            key = self._key(rtype, meta.get("namespace"), meta["name"])
            if key in self._objects[rtype.plural]:
                raise already_exists(rtype.plural, rtype.group, meta["name"])
            return self._create_locked(rtype, key, new, dry_run=dry_run)

    def _create_locked(self, rtype: ResourceType, key: Key, new: JSON, *, dry_run: bool) -> JSON:
        """rest.BeforeCreate and the write: system fields, the strategy's PrepareForCreate,
        validation, then the object as storage gives it back. ``new`` has the stored resource's
        shape; ``rtype`` is the resource the request named (a view's group qualifies its errors
        and chooses its validation)."""
        request_rtype, rtype = rtype, rtype.stored
        meta = new["metadata"]
        new["kind"], new["apiVersion"] = rtype.kind, rtype.api_version
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = rfc3339()
        if rtype is PDBS:
            meta["generation"] = 1
            new.pop("status", None)
        if rtype is PODS:
            # The registry discards a client-supplied pod status; the kubelet owns it.
            qos = (new.get("status") or {}).get("qosClass", "BestEffort")
            new["status"] = {"phase": "Pending", "qosClass": qos}
        new = codec.canonical(rtype.schema, new)
        validation.validate_create(request_rtype, new)
        if dry_run:
            return self._present(request_rtype, new)
        self._bump(new)
        self._objects[rtype.plural][key] = new
        self._record(rtype, "ADDED", new, None)
        return self._present(request_rtype, new)

    def add(self, *objs: JSON) -> list[JSON]:
        """Insert complete objects as-is (status included), inferring the resource from `kind`.

        Each is decoded and validated as a create would be, so a fixture the real server would
        refuse fails here, where it is written, not at the first update of the object."""
        out: list[JSON] = []
        for obj in objs:
            rtype = BY_KIND[obj["kind"]]
            with self._lock:
                new = copy_json(obj)
                meta = new["metadata"]
                key = self._key(rtype, meta.get("namespace"), meta["name"])
                if key in self._objects[rtype.plural]:
                    raise already_exists(rtype.plural, rtype.group, meta["name"])
                meta.setdefault("uid", new_uid())
                meta.setdefault("creationTimestamp", rfc3339())
                if rtype is PDBS:
                    meta.setdefault("generation", 1)
                new = codec.canonical(rtype.schema, new)
                # As its kubelet or controller created it: an object the real server would have
                # refused cannot be in the store (it would only fail later, on its first update).
                validation.validate_create(rtype, new)
                self._bump(new)
                self._objects[rtype.plural][key] = new
                self._record(rtype, "ADDED", new, None)
                out.append(self._present(rtype, new))
        return out

    @staticmethod
    def _check_name(rtype: ResourceType, old: JSON, new: JSON) -> JSON:
        """The handler's checkName: the body must name the object of the URL (400)."""
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        old_meta = old["metadata"]
        if meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match "
                f"the name on the URL ({old_meta['name']})"
            )
        if rtype.namespaced and meta.get("namespace", old_meta["namespace"]) != old_meta["namespace"]:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        return meta

    @staticmethod
    def _check_resource_version(rtype: ResourceType, old: JSON, new: JSON) -> None:
        """Store.Update's optimistic lock, before any validation: no resourceVersion is an
        unconditional update where the strategy allows one and 422 where it does not (Leases); a
        different one is 409 Conflict
        (https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go)."""
        meta, old_meta = new["metadata"], old["metadata"]
        if not meta.get("resourceVersion"):
            if not rtype.allow_unconditional_update:
                # The kind of this error is the resource, as the store writes it (#18526).
                raise invalid_error(
                    rtype.plural,
                    rtype.group,
                    old_meta["name"],
                    [
                        invalid(
                            "metadata.resourceVersion",
                            messages.UNSET_RESOURCE_VERSION,
                            messages.RESOURCE_VERSION_REQUIRED,
                        )
                    ],
                )
            meta["resourceVersion"] = old_meta["resourceVersion"]
        elif meta["resourceVersion"] != old_meta["resourceVersion"]:
            raise conflict(rtype.plural, rtype.group, old_meta["name"], STALE_OBJECT)

    def _before_update(self, rtype: ResourceType, old: JSON, new: JSON, subresource: str | None) -> JSON:
        """rest.BeforeUpdate: what the client may not change is restored or refused (422).
        ``new`` has the stored resource's shape; ``rtype`` is the one the request named."""
        request_rtype, rtype = rtype, rtype.stored
        meta, old_meta = new["metadata"], old["metadata"]
        new["kind"], new["apiVersion"] = rtype.kind, rtype.api_version
        # Generation is the server's; a uid, if sent, must be the object's (validated below).
        if "generation" in old_meta:
            meta["generation"] = old_meta["generation"]
        else:
            meta.pop("generation", None)
        if not meta.get("uid"):
            meta["uid"] = old_meta["uid"]
        meta["creationTimestamp"] = old_meta.get("creationTimestamp")
        if old_meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = old_meta["deletionTimestamp"]
        if (
            old_meta.get("deletionGracePeriodSeconds") is not None
            and meta.get("deletionGracePeriodSeconds") is None
        ):
            meta["deletionGracePeriodSeconds"] = old_meta["deletionGracePeriodSeconds"]
        if rtype.has_status:
            # The strategies' PrepareForUpdate: the main resource keeps the old status, the
            # status subresource the old spec.
            if subresource == "status":
                new["spec"] = copy_json(old.get("spec"))
                if rtype is PODS:
                    # pods/status may not rewrite owner references (old kubelets corrupted them).
                    if "ownerReferences" in old_meta:
                        meta["ownerReferences"] = copy_json(old_meta["ownerReferences"])
                    else:
                        meta.pop("ownerReferences", None)
            else:
                new["status"] = copy_json(old.get("status"))
        new = codec.canonical(rtype.schema, new)
        validation.validate_update(request_rtype, new, old, subresource)
        if rtype is PDBS and new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
        return new

    def _commit_update(self, rtype: ResourceType, key: Key, old: JSON, new: JSON) -> JSON:
        # What storage keeps decides whether anything changed: an update that encodes to the
        # stored bytes writes nothing and keeps the resourceVersion (etcd3 GuaranteedUpdate).
        rtype = rtype.stored
        new = codec.canonical(rtype.schema, new)
        if new == old:
            return old
        meta = new["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and (rtype is not PODS or meta.get("deletionGracePeriodSeconds", 0) == 0)
        ):
            self._remove(rtype, key, new)
            return new
        self._bump(new)
        self._objects[rtype.plural][key] = new
        self._record(rtype, "MODIFIED", new, copy_json(old))
        return new

    def replace(
        self,
        resource: str | ResourceType,
        name: str,
        obj: JSON,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> tuple[JSON, bool]:
        """PUT: the object, and whether this PUT created it (201)."""
        rtype = self._rtype(resource)
        try:
            with self._lock:
                new = views.to_storage(rtype, copy_json(obj))
                key = self._key(rtype, namespace, name)
                old = self._objects[rtype.plural].get(key)
                meta = new.get("metadata")
                uid = meta.get("uid") if isinstance(meta, dict) else None
                if uid and uid != (old or {}).get("metadata", {}).get("uid", ""):
                    # The uid of a PUT body is a precondition on the stored object
                    # (rest.DefaultUpdatedObjectInfo.Preconditions), checked before anything else.
                    raise conflict(
                        rtype.plural,
                        rtype.group,
                        name,
                        f"Precondition failed: UID in precondition: {uid}, "
                        f"UID in object meta: {(old or {}).get('metadata', {}).get('uid', '')}",
                    )
                if old is None:
                    if not rtype.allow_create_on_update or subresource is not None:
                        raise not_found(rtype.plural, rtype.group, name)
                    # AllowCreateOnUpdate (Leases): the PUT creates the object.
                    self._check_name(rtype, {"metadata": {"name": name, "namespace": namespace or ""}}, new)
                    new["metadata"].update({"name": name, **({"namespace": namespace} if namespace else {})})
                    return self._create_locked(rtype, key, new, dry_run=dry_run), True
                self._check_name(rtype, old, new)
                self._check_resource_version(rtype, old, new)
                new = self._before_update(rtype, old, new, subresource)
                if dry_run:
                    return self._present(rtype, new), False
                return self._present(rtype, self._commit_update(rtype, key, old, new)), False
        finally:
            self._run_hooks()

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        content_type: str,
        body: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
        warnings: WarningRecorder | None = None,
    ) -> JSON:
        """PATCH, in the real order: the patch applies to the stored object, the result is decoded
        (unknown fields dropped, with warnings), then the resourceVersion is checked (409) and
        only then the update validated (422). A ``metadata.uid`` in a patch is no precondition:
        it is a change of an immutable field (422), unless the resourceVersion already failed."""
        rtype = self._rtype(resource)
        try:
            with self._lock:
                old = self._stored(rtype, name, namespace)
                current = self._present(rtype, old)
                if content_type == "application/strategic-merge-patch+json":
                    patched = strategic_merge_patch(rtype.kind, current, body)
                elif content_type == "application/merge-patch+json":
                    patched = merge_patch(current, body)
                    if not isinstance(patched, dict):
                        raise bad_request("a merge patch must be a JSON object")
                elif content_type == "application/json-patch+json":
                    patched = json_patch(current, body)
                else:
                    raise unsupported_media_type(content_type, list(PATCH_TYPES))
                new = _decode_patched(rtype, content_type, body, patched, field_validation, warnings)
                # The patch applies to the object in the request's version; what it made is
                # converted back to the stored shape, as the handler converts to the internal one.
                new = views.to_storage(rtype, new)
                self._check_name(rtype, old, new)
                self._check_resource_version(rtype, old, new)
                new = self._before_update(rtype, old, new, subresource)
                if dry_run:
                    return self._present(rtype, new)
                result = self._commit_update(rtype, self._key(rtype, namespace, name), old, new)
                return self._present(rtype, result)
        finally:
            self._run_hooks()

    def mutate(
        self, resource: str, name: str, change: Callable[[JSON], None], namespace: str | None = None
    ) -> JSON:
        """Apply `change` to a copy of the stored object and commit it (spec and status alike)."""
        rtype = self._rtype(resource)
        try:
            with self._lock:
                old = self._stored(rtype, name, namespace)
                new = copy_json(old)
                change(new)
                result = self._commit_update(rtype, self._key(rtype, namespace, name), old, new)
                return self._present(rtype, result)
        finally:
            self._run_hooks()

    def mutate_many(
        self,
        resource: str,
        changes: Sequence[tuple[str, Callable[[JSON], None]]],
        namespace: str | None = None,
    ) -> list[int]:
        """Apply each ``(name, change)`` as :meth:`mutate` would, all under one hold of the lock.

        Every change is its own write, with its own resourceVersion and watch event, exactly as
        the same mutations made one by one; only the lock is taken once (so no other writer or
        reader interleaves) and no copy is made for a caller that does not need one. Every name
        is checked before anything is written: a missing object changes nothing. Returns the
        resourceVersion of each write (unchanged objects keep theirs).
        """
        rtype = self._rtype(resource)
        if len({name for name, _ in changes}) != len(changes):
            raise ValueError("mutate_many changes each object once; merge the changes of one name")
        try:
            with self._lock:
                stored = [(name, self._stored(rtype, name, namespace)) for name, _ in changes]
                versions: list[int] = []
                for (name, old), (_, change) in zip(stored, changes, strict=True):
                    new = copy_json(old)
                    change(new)
                    result = self._commit_update(rtype, self._key(rtype, namespace, name), old, new)
                    versions.append(int(result["metadata"]["resourceVersion"]))
                return versions
        finally:
            self._run_hooks()

    # ---- deletion ----------------------------------------------------------------------------

    def _remove(self, rtype: ResourceType, key: Key, obj: JSON) -> None:
        # The stored object is the DELETED event's "previous": what a read as of an earlier
        # revision still sees.
        stored = self._objects[rtype.plural].pop(key, None)
        self._bump(obj)
        self._record(rtype, "DELETED", obj, stored)
        self._stop_seconds.pop(obj["metadata"]["uid"], None)
        if rtype is PODS:
            self._fire("pod_deleted", obj)
        elif rtype is NODES:
            self._dead_kubelets.pop(obj["metadata"]["uid"], None)
            self._fire("node_deleted", obj)

    def remove(self, resource: str, name: str, namespace: str | None = None) -> None:
        """Remove an object at once, ignoring finalizers and grace periods."""
        rtype = self._rtype(resource)
        try:
            with self._lock:
                obj = copy_json(self._stored(rtype, name, namespace))
                self._remove(rtype, self._key(rtype, namespace, name), obj)
        finally:
            self._run_hooks()

    def _check_preconditions(self, rtype: ResourceType, obj: JSON, options: JSON) -> None:
        """rest.BeforeDelete's early check of DeleteOptions.preconditions, which is what a client
        sees: a Conflict on the object's Kind (details.kind "Pod", not "pods"), uid first. A
        precondition that is present is compared even when empty, as the pointer is set.
        https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/rest/delete.go#L83-L91"""
        pre = options.get("preconditions") or {}
        meta = obj["metadata"]
        if pre.get("uid") is not None and pre["uid"] != meta["uid"]:
            raise conflict(
                rtype.kind,
                rtype.group,
                meta["name"],
                messages.PRECONDITION_UID_MISMATCH.format(precondition=pre["uid"], record=meta["uid"]),
            )
        if pre.get("resourceVersion") is not None and pre["resourceVersion"] != meta["resourceVersion"]:
            raise conflict(
                rtype.kind,
                rtype.group,
                meta["name"],
                messages.PRECONDITION_RESOURCE_VERSION_MISMATCH.format(
                    precondition=pre["resourceVersion"], record=meta["resourceVersion"]
                ),
            )

    def _pod_grace(self, pod: JSON, options: JSON) -> int:
        requested = options.get("gracePeriodSeconds")
        grace = (
            int(requested)
            if requested is not None
            else int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        )
        phase = (pod.get("status") or {}).get("phase")
        if not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
            # An unscheduled or finished pod has no containers for a kubelet to stop.
            return 0
        return max(grace, 0)

    def delete(
        self,
        resource: str | ResourceType,
        name: str,
        namespace: str | None = None,
        options: JSON | None = None,
    ) -> JSON:
        """DELETE as the registry answers it: the object (pods, or pending finalizers) or a Status."""
        rtype = self._rtype(resource)
        opts = options or {}
        dry_run = bool(opts.get("dryRun"))
        try:
            with self._lock:
                key = self._key(rtype, namespace, name)
                stored = self._stored(rtype, name, namespace)
                # The Conflict names the Kind of the internal object (objectMetaAndKind in
                # rest.BeforeDelete): the stored resource's, whichever group the request used.
                self._check_preconditions(rtype.stored, stored, opts)
                obj = copy_json(stored)
                meta = obj["metadata"]
                grace = self._pod_grace(obj, opts) if rtype is PODS else 0
                if dry_run:
                    return self._delete_answer(rtype, obj)
                if grace > 0 or meta.get("finalizers"):
                    return self._present(rtype, self._begin_graceful(rtype, key, stored, grace))
                self._remove(rtype, key, obj)
                return self._delete_answer(rtype, obj)
        finally:
            self._run_hooks()

    def _delete_answer(self, rtype: ResourceType, obj: JSON) -> JSON:
        if rtype.returns_deleted_object:
            return self._present(rtype, obj)
        details: JSON = {"name": obj["metadata"]["name"]}
        if rtype.group:
            details["group"] = rtype.group
        details.update({"kind": rtype.plural, "uid": obj["metadata"]["uid"]})
        body = success_status(200, details)
        body.pop("code")
        return body

    def _begin_graceful(self, rtype: ResourceType, key: Key, stored: JSON, grace: int) -> JSON:
        new = copy_json(stored)
        meta = new["metadata"]
        now = datetime.now(UTC)
        if meta.get("deletionTimestamp"):
            # A second delete may shorten the grace period but never extend it.
            current = int(meta.get("deletionGracePeriodSeconds", 0))
            if grace >= current:
                return stored
        meta["deletionTimestamp"] = rfc3339(now + timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        new = codec.canonical(rtype.schema, new)
        self._bump(new)
        self._objects[rtype.plural][key] = new
        self._record(rtype, "MODIFIED", new, copy_json(stored))
        if rtype is NODECLAIMS and not stored["metadata"].get("deletionTimestamp"):
            # What Karpenter's termination controller watches for (a simulated Karpenter acts on it).
            self._fire("nodeclaim_deleting", new)
        if rtype is PODS:
            stop = self._stop_seconds.get(meta["uid"])
            seconds = grace if stop is None else min(stop, grace)
            self._schedule(seconds * self.time_scale, key, meta["uid"])
        return new

    def _schedule(self, delay: float, key: Key, uid: str) -> None:
        heapq.heappush(self._deadlines, (time.monotonic() + delay, next(self._seq), key[0], key[1], uid))
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="sim-pod-reaper", daemon=True)
            self._reaper.start()
        self.changed.notify_all()

    def _reap(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                if not self._deadlines or self._deadlines[0][0] > now:
                    wait = self._deadlines[0][0] - now if self._deadlines else None
                    self.changed.wait(wait)
                    continue
                _, _, ns, name, uid = heapq.heappop(self._deadlines)
                pod = self._objects["pods"].get((ns, name))
                if (
                    pod is not None
                    and pod["metadata"]["uid"] == uid
                    and pod["metadata"].get("deletionTimestamp")
                ):
                    owed = self._dead_kubelet_of(pod)
                    if owed is not None:
                        # Nobody stops the containers or sends the final delete: the pod stays
                        # Terminating until the kubelet is back or someone deletes it with grace 0.
                        owed.append((ns, name, uid))
                        continue
                    # The kubelet's final delete: grace period 0 once the containers have stopped.
                    new = copy_json(pod)
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    if new["metadata"].get("finalizers"):
                        new = codec.canonical(PODS.schema, new)
                        self._bump(new)
                        self._objects["pods"][(ns, name)] = new
                        self._record(PODS, "MODIFIED", new, copy_json(pod))
                    else:
                        self._remove(PODS, (ns, name), new)
            self._run_hooks()

    # ---- the kubelet ------------------------------------------------------------------------

    def _dead_kubelet_of(self, pod: JSON) -> list[tuple[str, str, str]] | None:
        node = self._objects["nodes"].get(("", pod["spec"].get("nodeName") or ""))
        return None if node is None else self._dead_kubelets.get(node["metadata"]["uid"])

    def set_kubelet_alive(self, node: str, alive: bool) -> None:
        """Kill or revive the kubelet of the Node now called ``node``.

        A kubelet is what finishes a graceful pod deletion: it stops the containers and sends the
        final delete (grace period 0). With it dead (a node whose GPU took the kernel down with
        it), every pod on the node that is deleted with a grace period stays Terminating, its
        deletionTimestamp set, for ever; a delete with gracePeriodSeconds=0 still removes it at
        once, as the API server does it alone. A revived kubelet stops whatever is past its grace
        period at once. The switch belongs to the Node object: a new Node that takes the name
        (EC2 reuses private IPs) has a kubelet of its own.
        """
        with self._lock:
            uid = self._stored(NODES, node, None)["metadata"]["uid"]
            if not alive:
                self._dead_kubelets.setdefault(uid, [])
                return
            owed = self._dead_kubelets.pop(uid, [])
            now = time.monotonic()
            for ns, name, pod_uid in owed:
                heapq.heappush(self._deadlines, (now, next(self._seq), ns, name, pod_uid))
            self.changed.notify_all()

    def kubelet_alive(self, node: str) -> bool:
        with self._lock:
            return self._stored(NODES, node, None)["metadata"]["uid"] not in self._dead_kubelets

    def stuck_terminating(self, node: str) -> list[str]:
        """``namespace/name`` of the pods on ``node`` whose grace period is over but whose final
        delete its dead kubelet owes: Terminating until it comes back or a delete with grace 0."""
        with self._lock:
            owed = self._dead_kubelets.get(self._stored(NODES, node, None)["metadata"]["uid"], [])
            return sorted(
                {
                    f"{ns}/{name}"
                    for ns, name, uid in owed
                    if (self._objects["pods"].get((ns, name)) or {}).get("metadata", {}).get("uid") == uid
                }
            )

    def set_pod_stop_seconds(self, namespace: str, name: str, seconds: float) -> None:
        """The pod's containers stop this many (simulated) seconds after deletion starts."""
        with self._lock:
            pod = self._stored(PODS, name, namespace)
            self._stop_seconds[pod["metadata"]["uid"]] = seconds


def _go_map_text(value: Any) -> str:
    """``fmt.Sprintf("%+v", patchMap)`` of a decoded JSON patch, as the strategic-merge error shows it."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_map_text(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_map_text(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode_patched(
    rtype: ResourceType,
    content_type: str,
    patch: Any,
    patched: JSON,
    field_validation: str,
    warnings: WarningRecorder | None,
) -> JSON:
    """Decode the patched object as jsonPatcher / applyPatchToObject do: a decoding error is a 422
    on the field ``patch`` (its value the patched object, or for a strategic merge patch the
    patch); unknown fields are warnings (Warn), a 422 (Strict) or nothing (Ignore)
    (https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/patch.go)."""
    if content_type == "application/strategic-merge-patch+json":
        shown = go_quote(_go_map_text(patch))
    else:
        shown = go_quote(json.dumps(patched, separators=(",", ":")))
    try:
        decoded = codec.decode(rtype.schema, patched)
    except codec.DecodeError as exc:
        raise invalid_error("", "", "", [invalid(messages.PATCH_FIELD, shown, str(exc))]) from None
    if decoded.strict_errors and field_validation == "Strict":
        detail = codec.strict_error_text(decoded.strict_errors)
        raise invalid_error("", "", "", [invalid(messages.PATCH_FIELD, shown, detail)])
    if field_validation == "Warn" and warnings is not None:
        for text in decoded.strict_errors:
            warnings.add(text)
    return decoded.object
