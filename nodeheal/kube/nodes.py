"""Node operations: read, cordon, uncordon, delete.

Cordon and uncordon are read-modify-write. ``spec.taints`` has no patch strategy, so a patch must
carry the node's whole taint list; sending it with ``metadata.resourceVersion`` makes the API
server refuse (409) if anything changed the node since the read — Karpenter adding its disruption
taint, the node lifecycle controller adding ``node.kubernetes.io/unreachable`` — instead of NodeHeal
silently dropping that taint. On a conflict the node is read again and the change recomputed.

The resourceVersion is also what keeps a patch off a replacement: a new Node with the old name has
a resourceVersion of its own, so the patch meets a 409 and the re-read finds the new uid. A uid in
the patch would prove nothing more: the API server does not treat it as a precondition but as a
change of an immutable field, checked only after the resourceVersion (store.go ``Update``, then
``ValidateObjectMetaUpdate``), so the patches carry none.

What NodeHeal writes is always recognisable as its own: the ``nodeheal.io/unhealthy`` taint and the
``nodeheal.io/*`` annotations. ``spec.unschedulable`` is shared with people (``kubectl cordon``) and
other controllers, so NodeHeal records whether it flipped the flag itself
(``nodeheal.io/cordoned-by-nodeheal: "true"``) and uncordon clears the flag only in that case.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from nodeheal.errors import KubernetesApiError, NodeGoneError
from nodeheal.kube.api_errors import error_for_status
from nodeheal.kube.client import (
    MERGE_PATCH,
    ApiOperations,
    expect_success,
)
from nodeheal.kube_views import (
    ANNOTATION_CORDONED_AT,
    ANNOTATION_CORDONED_BY_NODEHEAL,
    ANNOTATION_EXECUTION,
    ANNOTATION_REASON,
    UNHEALTHY_TAINT_KEY,
    LiveNode,
)
from nodeheal.timestamps import format_timestamp

logger = logging.getLogger(__name__)

UNHEALTHY_TAINT_EFFECT = "NoSchedule"
NODEHEAL_ANNOTATIONS = (
    ANNOTATION_EXECUTION,
    ANNOTATION_REASON,
    ANNOTATION_CORDONED_AT,
    ANNOTATION_CORDONED_BY_NODEHEAL,
)
#: Attempts of a read-modify-write before a persistent conflict is reported. Conflicts on a node
#: come from controllers updating it every few seconds; a handful of immediate retries wins.
MAX_CONFLICT_ATTEMPTS = 5
#: Annotation values are free text, but the reason is shown in ``kubectl describe``; keep it readable.
MAX_REASON_LENGTH = 1024


@dataclass(frozen=True, slots=True)
class CordonResult:
    """What :meth:`NodeOperations.cordon` did.

    ``node`` is the node as the API server returned it after the patch (or as read, when nothing
    needed changing). ``changed`` is False only when the node was already cordoned by this very
    execution. ``flipped_unschedulable`` says whether NodeHeal owns ``spec.unschedulable`` on this
    node (it set it, now or in an earlier execution), which is what uncordon will undo.
    ``previous_execution`` names another NodeHeal execution whose cordon this one took over.
    """

    node: LiveNode
    changed: bool
    flipped_unschedulable: bool
    previous_execution: str | None = None


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}"


def _raw_taints(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    taints = (obj.get("spec") or {}).get("taints") or []
    return [dict(t) for t in taints if isinstance(t, dict)]


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _is_ours(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == UNHEALTHY_TAINT_KEY


class NodeOperations(ApiOperations):
    # -- reads -----------------------------------------------------------------------------------

    def get(self, name: str) -> LiveNode | None:
        raw = self._get_raw(name)
        return None if raw is None else LiveNode.from_api(raw)

    def list_raw(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Every Node as the API server sent it, as one consistent list (see ``_list``), for what
        needs more than the view."""
        action = f"list nodes (labelSelector={label_selector!r})" if label_selector else "list nodes"
        query = [("labelSelector", label_selector)] if label_selector else []
        return self._list("/api/v1/nodes", action=action, query=query)

    def list(self, label_selector: str | None = None) -> list[LiveNode]:
        return [LiveNode.from_api(item) for item in self.list_raw(label_selector)]

    def _get_raw(self, name: str) -> dict[str, Any] | None:
        action = f"get node {name}"
        response = self._request("GET", _node_path(name), action=action)
        if response.status == 404:
            return None
        return expect_success(response, action=action)

    def _read_for_update(self, name: str, expected_uid: str | None, action: str) -> dict[str, Any]:
        raw = self._get_raw(name)
        if raw is None:
            raise NodeGoneError(f"{action}: node {name} no longer exists")
        uid = str((raw.get("metadata") or {}).get("uid", ""))
        if expected_uid and uid != expected_uid:
            raise NodeGoneError(
                f"{action}: node {name} was replaced (uid {uid}, expected {expected_uid}); "
                "not touching the new node"
            )
        return raw

    def _patch(self, name: str, patch: Mapping[str, Any], action: str) -> tuple[int, dict[str, Any] | None]:
        """Send a merge patch; return (status, body). 409 is returned for the caller to retry."""
        response = self._request(
            "PATCH", _node_path(name), action=action, body=patch, content_type=MERGE_PATCH
        )
        if response.status == 409:
            return 409, None
        if response.status == 404:
            raise NodeGoneError(f"{action}: node {name} was deleted")
        return response.status, expect_success(response, action=action)

    # -- cordon ----------------------------------------------------------------------------------

    def cordon(
        self,
        name: str,
        *,
        execution: str,
        reason: str,
        now: datetime,
        expected_uid: str | None = None,
    ) -> CordonResult:
        """Mark the node unschedulable, taint it ``nodeheal.io/unhealthy:NoSchedule``, and annotate it.

        Raises :class:`NodeGoneError` if the node does not exist (or, with ``expected_uid``, is a
        different object than the one being remediated).
        """
        action = f"cordon node {name}"
        for attempt in range(1, MAX_CONFLICT_ATTEMPTS + 1):
            raw = self._read_for_update(name, expected_uid, action)
            node = LiveNode.from_api(raw)
            annotations = _annotations(raw)
            taints = _raw_taints(raw)
            has_taint = any(_is_ours(t) for t in taints)
            owned_flag = annotations.get(ANNOTATION_CORDONED_BY_NODEHEAL) == "true"
            previous = annotations.get(ANNOTATION_EXECUTION)

            if node.unschedulable and has_taint and previous == execution:
                return CordonResult(node=node, changed=False, flipped_unschedulable=owned_flag)

            # Already unschedulable without NodeHeal's mark: a person or another controller cordoned
            # it, and uncordon must leave it that way. A mark from an earlier NodeHeal execution
            # stays, since NodeHeal still owns that flag.
            flipped = owned_flag if node.unschedulable else True
            new_annotations: dict[str, str | None] = {
                ANNOTATION_EXECUTION: execution,
                ANNOTATION_REASON: reason[:MAX_REASON_LENGTH],
                ANNOTATION_CORDONED_AT: format_timestamp(now),
                ANNOTATION_CORDONED_BY_NODEHEAL: "true" if flipped else None,
            }
            if not has_taint:
                taints.append({"key": UNHEALTHY_TAINT_KEY, "effect": UNHEALTHY_TAINT_EFFECT})
            patch = {
                "metadata": {"resourceVersion": node.resource_version, "annotations": new_annotations},
                "spec": {"unschedulable": True, "taints": taints},
            }
            status, body = self._patch(name, patch, action)
            if status == 409:
                logger.info("cordon %s: conflict on attempt %d, re-reading the node", name, attempt)
                continue
            assert body is not None
            return CordonResult(
                node=LiveNode.from_api(body),
                changed=True,
                flipped_unschedulable=flipped,
                previous_execution=previous if previous and previous != execution else None,
            )
        raise KubernetesApiError(
            f"{action}: the node kept changing under NodeHeal ({MAX_CONFLICT_ATTEMPTS} conflicting updates)"
        )

    # -- uncordon --------------------------------------------------------------------------------

    def uncordon(self, name: str, *, expected_uid: str | None = None) -> bool:
        """Undo NodeHeal's cordon: remove its taint and annotations, and clear ``spec.unschedulable``
        only if NodeHeal set it. Returns whether anything changed.

        Raises :class:`NodeGoneError` if the node does not exist (or is a different object).
        """
        action = f"uncordon node {name}"
        for attempt in range(1, MAX_CONFLICT_ATTEMPTS + 1):
            raw = self._read_for_update(name, expected_uid, action)
            node = LiveNode.from_api(raw)
            annotations = _annotations(raw)
            taints = _raw_taints(raw)
            kept = [t for t in taints if not _is_ours(t)]
            ours_present = [key for key in NODEHEAL_ANNOTATIONS if key in annotations]
            owned_flag = annotations.get(ANNOTATION_CORDONED_BY_NODEHEAL) == "true"
            clear_flag = owned_flag and node.unschedulable

            if len(kept) == len(taints) and not ours_present and not clear_flag:
                return False

            spec: dict[str, Any] = {}
            if len(kept) != len(taints):
                # An empty list rather than null: both clear the field, but [] reads unambiguously.
                spec["taints"] = kept
            if clear_flag:
                spec["unschedulable"] = False
            patch: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": node.resource_version,
                    "annotations": dict.fromkeys(ours_present),
                }
            }
            if spec:
                patch["spec"] = spec
            status, _ = self._patch(name, patch, action)
            if status == 409:
                logger.info("uncordon %s: conflict on attempt %d, re-reading the node", name, attempt)
                continue
            return True
        raise KubernetesApiError(
            f"{action}: the node kept changing under NodeHeal ({MAX_CONFLICT_ATTEMPTS} conflicting updates)"
        )

    # -- delete ----------------------------------------------------------------------------------

    def delete(self, name: str, uid: str) -> bool:
        """Delete the Node object, only if it is still the object with ``uid``.

        Returns True when this call deleted it, False when it was already gone or replaced by a new
        Node with the same name (which is left alone).
        """
        action = f"delete node {name}"
        response = self._request(
            "DELETE",
            _node_path(name),
            action=action,
            body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
        )
        if response.ok:
            return True
        if response.status == 404:
            return False
        if response.status == 409:
            # A failed uid precondition answers 409 as well as a genuine conflict; only the first
            # means "our node is gone", so look before deciding.
            current = self._get_raw(name)
            if current is None or str((current.get("metadata") or {}).get("uid", "")) != uid:
                return False
        raise error_for_status(response.api_status, action=action)
