"""Karpenter NodeClaim operations (replace.method delete-nodeclaim) against the fake API server."""

from __future__ import annotations

import pytest

from nodeheal.errors import OwnershipVerificationError
from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.nodeclaims import NodeClaimOperations
from nodeheal.sim.apiserver import FakeKubeApiServer, make_nodeclaim
from nodeheal.sim.apiserver.objects import KARPENTER_TERMINATION_FINALIZER
from nodeheal.sim.apiserver.status import ApiError

PROVIDER_A = "aws:///us-west-2b/i-0aaaaaaaaaaaaaaaa"
PROVIDER_B = "aws:///us-west-2b/i-0bbbbbbbbbbbbbbbb"


@pytest.fixture
def nodeclaims(kube: FakeKubeApiServer) -> NodeClaimOperations:
    # A page of one, so finding the bound claim reads the list across continue tokens.
    return NodeClaimOperations(StaticClientProvider(kube.url, token="sim").transport("sim"), page_size=1)


def _exists(kube: FakeKubeApiServer, name: str) -> bool:
    try:
        kube.store.get("nodeclaims", name)
    except ApiError as missing:
        assert missing.code == 404
        return False
    return True


def test_the_bound_nodeclaim_is_the_one_whose_provider_id_is_the_instances(
    kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations
) -> None:
    kube.store.add(
        make_nodeclaim("gpu-b7x2k", provider_id=PROVIDER_B, node_name="gpu-b"),
        make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_A, node_name="gpu-a"),
        # Launched, not registered yet: no providerID to match.
        make_nodeclaim("gpu-zzzzz", provider_id=""),
    )
    claim = nodeclaims.bound_to(PROVIDER_A)
    assert claim is not None
    assert (claim.name, claim.provider_id, claim.node_name) == ("gpu-a9q4m", PROVIDER_A, "gpu-a")
    assert claim.uid == kube.store.get("nodeclaims", "gpu-a9q4m")["metadata"]["uid"]
    assert not claim.deletion_requested


def test_no_nodeclaim_names_the_instance(kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations) -> None:
    kube.store.add(make_nodeclaim("gpu-b7x2k", provider_id=PROVIDER_B, node_name="gpu-a"))
    # The other claim even names the node: only the providerID binds a claim to the instance.
    assert nodeclaims.bound_to(PROVIDER_A) is None
    assert "deletionTimestamp" not in kube.store.get("nodeclaims", "gpu-b7x2k")["metadata"]


def test_two_nodeclaims_naming_one_instance_are_both_refused(
    kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations
) -> None:
    kube.store.add(
        make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_A),
        make_nodeclaim("gpu-a0000", provider_id=PROVIDER_A),
    )
    with pytest.raises(OwnershipVerificationError, match="gpu-a0000, gpu-a9q4m"):
        nodeclaims.bound_to(PROVIDER_A)
    with pytest.raises(OwnershipVerificationError, match="no providerID"):
        nodeclaims.bound_to("")


def test_delete_leaves_the_nodeclaim_to_karpenters_finalizer(
    kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations
) -> None:
    kube.store.add(make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_A))
    claim = nodeclaims.bound_to(PROVIDER_A)
    assert claim is not None
    deletion = nodeclaims.delete(claim)
    assert (deletion.name, deletion.uid, deletion.already_gone, deletion.finalizing) == (
        "gpu-a9q4m",
        claim.uid,
        False,
        True,
    )
    stored = kube.store.get("nodeclaims", "gpu-a9q4m")["metadata"]
    assert stored["deletionTimestamp"]
    assert stored["finalizers"] == [KARPENTER_TERMINATION_FINALIZER]
    again = nodeclaims.bound_to(PROVIDER_A)
    assert again is not None and again.deletion_requested
    # Asking again while Karpenter works is accepted as well (an idempotent retry of the step).
    assert nodeclaims.delete(again).finalizing


def test_a_nodeclaim_without_finalizer_is_removed_at_once(
    kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations
) -> None:
    kube.store.add(make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_A, finalizers=[]))
    claim = nodeclaims.bound_to(PROVIDER_A)
    assert claim is not None
    deletion = nodeclaims.delete(claim)
    assert (deletion.already_gone, deletion.finalizing) == (False, False)
    assert not _exists(kube, "gpu-a9q4m")


def test_a_nodeclaim_already_gone_is_success(
    kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations
) -> None:
    kube.store.add(make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_A, finalizers=[]))
    claim = nodeclaims.bound_to(PROVIDER_A)
    assert claim is not None
    kube.store.delete("nodeclaims", "gpu-a9q4m")
    deletion = nodeclaims.delete(claim)
    assert (deletion.already_gone, deletion.finalizing) == (True, False)


def test_a_nodeclaim_recreated_under_the_same_name_is_never_deleted(
    kube: FakeKubeApiServer, nodeclaims: NodeClaimOperations
) -> None:
    kube.store.add(make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_A, finalizers=[]))
    claim = nodeclaims.bound_to(PROVIDER_A)
    assert claim is not None
    kube.store.delete("nodeclaims", "gpu-a9q4m")
    kube.store.add(make_nodeclaim("gpu-a9q4m", provider_id=PROVIDER_B))
    with pytest.raises(OwnershipVerificationError, match=f"no longer uid {claim.uid}"):
        nodeclaims.delete(claim)
    recreated = kube.store.get("nodeclaims", "gpu-a9q4m")
    assert recreated["metadata"]["uid"] != claim.uid
    assert "deletionTimestamp" not in recreated["metadata"]
