"""Karpenter NodeClaims: find the one bound to an instance, and delete it (``replace.method:
delete-nodeclaim``).

A NodeClaim (``karpenter.sh/v1``, cluster-scoped) is Karpenter's record of one instance it
launched; ``status.providerID`` names that instance. Deleting the NodeClaim hands the instance to
Karpenter's termination controller: its ``karpenter.sh/termination`` finalizer drains the Node
(again, honouring the NodePool's ``terminationGracePeriod``), terminates the instance and removes
the Node, and only then lets the NodeClaim go. NodeHeal waits for none of that; it needs the API
server to have accepted the delete.

Two checks keep the delete on the admitted instance. The NodeClaim is chosen by its
``status.providerID`` equal to the admitted Node's providerID, never by the Node's
``karpenter.sh/nodepool`` label or by name: a NodeClaim bound to another instance is never touched.
The DELETE then carries the chosen object's uid as a precondition, so a NodeClaim recreated under
the same name between the list and the delete is refused (409) instead of deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from nodeheal.errors import OwnershipVerificationError
from nodeheal.kube.api_errors import error_for_status
from nodeheal.kube.client import ApiOperations

NODECLAIMS_PATH = "/apis/karpenter.sh/v1/nodeclaims"


def _nodeclaim_path(name: str) -> str:
    return f"{NODECLAIMS_PATH}/{quote(name, safe='')}"


@dataclass(frozen=True, slots=True)
class BoundNodeClaim:
    """The NodeClaim whose ``status.providerID`` names an instance."""

    name: str
    uid: str
    provider_id: str
    node_name: str
    #: Already being deleted (by Karpenter's own disruption, a person, or an earlier attempt).
    deletion_requested: bool

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> BoundNodeClaim:
        meta = raw.get("metadata") or {}
        status = raw.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            provider_id=str(status.get("providerID", "")),
            node_name=str(status.get("nodeName", "")),
            deletion_requested=bool(meta.get("deletionTimestamp")),
        )


@dataclass(frozen=True, slots=True)
class NodeClaimDeletion:
    """What a DELETE of a NodeClaim came to.

    ``already_gone``: the API server no longer had it (404), which is success: whoever removed it
    went through Karpenter's finalizer. ``finalizing``: the object is still there with a
    deletionTimestamp, waiting for Karpenter's termination finalizer (the usual answer).
    Otherwise the object was removed at once (it carried no finalizer)."""

    name: str
    uid: str
    already_gone: bool
    finalizing: bool


class NodeClaimOperations(ApiOperations):
    def bound_to(self, provider_id: str) -> BoundNodeClaim | None:
        """The NodeClaim whose ``status.providerID`` is ``provider_id``, or None when none is.

        Raises :class:`OwnershipVerificationError` when more than one claims the instance: which
        one Karpenter accounts the instance to is then unclear, and NodeHeal deletes neither.
        """
        if not provider_id:
            raise OwnershipVerificationError("no providerID to find a NodeClaim by: not deleting any")
        # NodeClaims carry no field selector on status.providerID (the CRD declares none), so the
        # list is read whole and filtered here; a cluster has one NodeClaim per Karpenter node.
        items = self._list(NODECLAIMS_PATH, action="list nodeclaims")
        bound = [
            BoundNodeClaim.from_api(item)
            for item in items
            if str((item.get("status") or {}).get("providerID", "")) == provider_id
        ]
        if len(bound) > 1:
            names = ", ".join(sorted(claim.name for claim in bound))
            raise OwnershipVerificationError(
                f"{len(bound)} NodeClaims ({names}) name providerID {provider_id!r}: not deleting any"
            )
        return bound[0] if bound else None

    def delete(self, claim: BoundNodeClaim) -> NodeClaimDeletion:
        """Delete ``claim``, only while it is still the object with ``claim.uid``.

        Raises :class:`OwnershipVerificationError` when the name now belongs to another NodeClaim
        (the uid precondition failed, 409): that one was never proven to be the admitted instance's.
        """
        action = f"delete nodeclaim {claim.name}"
        response = self._request(
            "DELETE",
            _nodeclaim_path(claim.name),
            action=action,
            body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": claim.uid}},
        )
        if response.status == 404:
            return NodeClaimDeletion(claim.name, claim.uid, already_gone=True, finalizing=False)
        if response.status == 409:
            raise OwnershipVerificationError(
                f"{action}: the NodeClaim of that name is no longer uid {claim.uid} (recreated under the "
                f"same name?); not deleting it: {response.api_status.explanation}"
            )
        if not response.ok:
            raise error_for_status(response.api_status, action=action)
        body = response.body if isinstance(response.body, dict) else {}
        # Custom resources answer DELETE with the object: with a deletionTimestamp while a
        # finalizer holds it, as it was when it is removed at once.
        finalizing = bool((body.get("metadata") or {}).get("deletionTimestamp")) and bool(
            (body.get("metadata") or {}).get("finalizers")
        )
        return NodeClaimDeletion(claim.name, claim.uid, already_gone=False, finalizing=finalizing)
