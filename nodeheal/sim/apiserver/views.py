"""One stored object, several API versions: the conversions between a view and its storage.

kube-apiserver keeps one object per name whichever API it came through, and converts it between
the request's version and the internal type on every read and write. The fake stores every
object in its own resource's version (core/v1 for Events, whose field names match the internal
``core.Event`` type's JSON one for one) and converts here for the resources served a second time
under another group (``ResourceType.storage``):

* **events.k8s.io/v1** ``Event`` ↔ core ``Event``, by ``Convert_v1_Event_To_core_Event`` and
  ``Convert_core_Event_To_v1_Event``
  (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/events/v1/conversion.go) and the
  generated ``autoConvert_*`` beside them (zz_generated.conversion.go): ``regarding`` is
  ``involvedObject``, ``note`` is ``message``, ``deprecatedSource`` / ``deprecatedFirstTimestamp``
  / ``deprecatedLastTimestamp`` / ``deprecatedCount`` are ``source`` / ``firstTimestamp`` /
  ``lastTimestamp`` / ``count``, and ``reportingController`` is the internal ``ReportingController``
  that core/v1 writes as ``reportingComponent``. Every other field (``eventTime``, ``series``,
  ``reportingInstance``, ``action``, ``reason``, ``related``, ``type``, metadata) keeps its name.
  Nothing is lost either way: the two shapes hold the same fields.
"""

from __future__ import annotations

from typing import Any

from nodeheal.sim.apiserver import codec
from nodeheal.sim.apiserver.resources import EVENTS_V1, ResourceType

JSON = dict[str, Any]

#: events.k8s.io/v1 field name -> core/v1 field name, for the fields whose name differs.
EVENTS_V1_RENAMED: dict[str, str] = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
_EVENTS_CORE_RENAMED = {core: v1 for v1, core in EVENTS_V1_RENAMED.items()}


def _rename(obj: JSON, names: dict[str, str]) -> JSON:
    return {names.get(key, key): value for key, value in obj.items()}


def to_storage(rtype: ResourceType, obj: JSON) -> JSON:
    """A decoded request body of ``rtype`` in the stored resource's shape (unchanged when
    ``rtype`` is the stored resource). ``kind``/``apiVersion`` become the stored ones."""
    if rtype.storage is None:
        return obj
    stored = rtype.stored
    if rtype is not EVENTS_V1:
        raise KeyError(f"no conversion from {rtype.api_version} {rtype.kind}")
    out = _rename(obj, EVENTS_V1_RENAMED)
    if "kind" in out:
        out["kind"] = stored.kind
    if "apiVersion" in out:
        out["apiVersion"] = stored.api_version
    return out


def from_storage(rtype: ResourceType, stored: JSON) -> JSON:
    """A stored object as ``rtype`` serves it, written by that version's struct tags."""
    if rtype.storage is None:
        return stored
    if rtype is not EVENTS_V1:
        raise KeyError(f"no conversion to {rtype.api_version} {rtype.kind}")
    out = _rename(stored, _EVENTS_CORE_RENAMED)
    if "kind" in out:
        out["kind"] = rtype.kind
    if "apiVersion" in out:
        out["apiVersion"] = rtype.api_version
    # The v1 struct omits other empty fields than core's (eventTime is written even when zero).
    return codec.canonical(rtype.schema, out)
