"""Read-only view of how an EKS cluster lets IAM principals in: its authentication mode and the
access entry of a principal.

An access entry maps an IAM principal to a Kubernetes username and groups; RBAC then authorizes
those groups (https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html). Entries only
count when the cluster's authentication mode is ``API`` or ``API_AND_CONFIG_MAP``
(``DescribeCluster``'s ``cluster.accessConfig.authenticationMode``). For an IAM role EKS generates
the username ``arn:aws:sts::<account>:assumed-role/<role name>/{{SessionName}}``: the session name
is filled in per request
(https://docs.aws.amazon.com/eks/latest/userguide/set-custom-username.html).

Response shapes: ``DescribeAccessEntry`` and ``DescribeCluster`` of the EKS API reference
(https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAccessEntry.html); a missing
entry or cluster is ``ResourceNotFoundException`` (HTTP 404).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: The modes in which EKS reads access entries.
ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    status: str
    #: None when DescribeCluster does not say (a cluster created before access entries existed
    #: reports CONFIG_MAP).
    authentication_mode: str | None


@dataclass(frozen=True, slots=True)
class AccessEntry:
    principal_arn: str
    kubernetes_groups: tuple[str, ...]
    username: str
    type: str

    def username_for_session(self, session_name: str) -> str:
        """The Kubernetes username of one session of the principal (``{{SessionName}}`` filled in)."""
        return self.username.replace("{{SessionName}}", session_name).replace(
            "{{SessionNameRaw}}", session_name
        )


class EksAccess(Protocol):
    def cluster(self, name: str) -> ClusterAccess | None: ...
    def access_entry(self, cluster: str, principal_arn: str) -> AccessEntry | None: ...


def _not_found(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    return (
        isinstance(response, Mapping) and response.get("Error", {}).get("Code") == "ResourceNotFoundException"
    )


class BotoEksAccess:
    """:class:`EksAccess` over a boto3 ``eks`` client; reads only."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def cluster(self, name: str) -> ClusterAccess | None:
        try:
            cluster = self._client.describe_cluster(name=name)["cluster"]
        except Exception as exc:
            if _not_found(exc):
                return None
            raise
        mode = (cluster.get("accessConfig") or {}).get("authenticationMode")
        return ClusterAccess(
            status=str(cluster.get("status", "")), authentication_mode=str(mode) if mode else None
        )

    def access_entry(self, cluster: str, principal_arn: str) -> AccessEntry | None:
        try:
            entry = self._client.describe_access_entry(clusterName=cluster, principalArn=principal_arn)[
                "accessEntry"
            ]
        except Exception as exc:
            if _not_found(exc):
                return None
            raise
        return AccessEntry(
            principal_arn=str(entry.get("principalArn", principal_arn)),
            kubernetes_groups=tuple(str(group) for group in entry.get("kubernetesGroups") or ()),
            username=str(entry.get("username", "")),
            type=str(entry.get("type", "")),
        )
