"""EKS authentication: the bearer token ``aws eks get-token`` prints, and the cluster's endpoint and CA.

The token is a presigned STS ``GetCallerIdentity`` URL. The EKS authenticator replays the URL
(with the ``x-k8s-aws-id`` header) against STS and maps the caller to a Kubernetes identity, so
the URL must be signed exactly as the AWS CLI and aws-iam-authenticator sign it:

* GET ``https://sts.<region>.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15``;
* ``x-k8s-aws-id: <cluster>`` sent as a *signed header*, not hoisted into the query string: the
  authenticator rejects a token whose ``X-Amz-SignedHeaders`` lacks it, which is what stops a token
  minted for one cluster being replayed against another;
* ``X-Amz-Expires=60`` (the authenticator ignores it and accepts the token for 15 minutes from
  ``X-Amz-Date``);
* base64url without padding, prefixed ``k8s-aws-v1.``.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from botocore.hooks import HierarchicalEmitter
from botocore.model import ServiceId
from botocore.signers import RequestSigner

from nodeheal.errors import ConfigurationError, KubernetesApiUnavailableError
from nodeheal.timestamps import utc_now

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
#: Lifetime of the presigned URL itself; the value the AWS CLI and aws-iam-authenticator use.
PRESIGN_EXPIRES_SECONDS = 60
#: How long the EKS authenticator accepts a token after it was signed.
TOKEN_LIFETIME = timedelta(minutes=15)
#: Mint a new token this long before the old one expires, so a request in flight (or a clock a
#: little ahead of STS) never carries a token that expires on the way.
REFRESH_MARGIN = timedelta(minutes=1)

Clock = Callable[[], datetime]


class CredentialSource(Protocol):
    """Anything that hands out AWS credentials: a ``boto3.Session`` or a botocore session.

    Credentials are fetched on every signing, so refreshable credentials (a Lambda role, IRSA,
    Pod Identity) are refreshed by botocore as usual.
    """

    def get_credentials(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class EksToken:
    value: str
    expires_at: datetime

    def fresh_at(self, now: datetime) -> bool:
        return now < self.expires_at - REFRESH_MARGIN


def sts_endpoint(region: str) -> str:
    # The regional endpoint: the authenticator only accepts STS hosts of the cluster's partition,
    # and the global endpoint would tie every token to us-east-1's availability.
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://sts.{region}.{suffix}"


def presign_get_caller_identity(credentials: Any, *, region: str, cluster: str) -> str:
    """The presigned ``GetCallerIdentity`` URL carrying ``x-k8s-aws-id: <cluster>`` as a signed header."""
    if credentials is None:
        raise ConfigurationError("no AWS credentials available to sign the EKS token")
    # A private emitter: the token must be signed plainly, whatever handlers an application
    # registered on its own session's events. The signer holds it by weak reference only, so this
    # local keeps it alive until signing is done.
    emitter = HierarchicalEmitter()
    signer = RequestSigner(ServiceId("sts"), region, "sts", "v4", credentials, emitter)
    request_dict: dict[str, Any] = {
        "method": "GET",
        "url": f"{sts_endpoint(region)}/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {CLUSTER_ID_HEADER: cluster},
        "context": {},
    }
    url = signer.generate_presigned_url(
        request_dict,
        operation_name="GetCallerIdentity",
        expires_in=PRESIGN_EXPIRES_SECONDS,
        region_name=region,
    )
    return str(url)


def encode_token(presigned_url: str) -> str:
    encoded = base64.urlsafe_b64encode(presigned_url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


def decode_token(token: str) -> str:
    """The presigned URL inside a token (used by tests and when debugging a 401)."""
    if not token.startswith(TOKEN_PREFIX):
        raise ValueError(f"not an EKS token: it does not start with {TOKEN_PREFIX!r}")
    payload = token[len(TOKEN_PREFIX) :]
    padded = payload + "=" * (-len(payload) % 4)
    return base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")


class EksTokenSource:
    """Mints and caches bearer tokens, one per cluster, refreshed a minute before they expire."""

    def __init__(self, credentials: CredentialSource, *, region: str, clock: Clock = utc_now) -> None:
        if not region:
            raise ConfigurationError("an AWS region is required to sign EKS tokens")
        self._credentials = credentials
        self._region = region
        self._clock = clock
        self._tokens: dict[str, EksToken] = {}
        # Eviction runs in a thread pool over one transport; each request asks for the token.
        self._lock = threading.Lock()

    @property
    def region(self) -> str:
        return self._region

    def token(self, cluster: str) -> str:
        return self.get(cluster).value

    def get(self, cluster: str) -> EksToken:
        with self._lock:
            now = self._clock()
            cached = self._tokens.get(cluster)
            if cached is not None and cached.fresh_at(now):
                return cached
            # The signature's own clock is the system clock; the lifetime is counted from the
            # injected clock read just before signing, so it can only be shorter than the real one.
            url = presign_get_caller_identity(
                self._credentials.get_credentials(), region=self._region, cluster=cluster
            )
            token = EksToken(value=encode_token(url), expires_at=now + TOKEN_LIFETIME)
            self._tokens[cluster] = token
            return token


@dataclass(frozen=True, slots=True)
class ClusterEndpoint:
    name: str
    endpoint: str
    #: PEM bundle (decoded from DescribeCluster's base64 ``certificateAuthority.data``).
    ca_pem: str


class ClusterDirectory:
    """``eks:DescribeCluster`` results, cached for the life of the container.

    An EKS cluster's endpoint and CA do not change while it exists, and a Lambda container lives
    minutes to hours, so one DescribeCluster per cluster per container is enough.
    """

    def __init__(self, eks_client: Any) -> None:
        self._eks = eks_client
        self._clusters: dict[str, ClusterEndpoint] = {}
        self._lock = threading.Lock()

    def get(self, cluster: str) -> ClusterEndpoint:
        with self._lock:
            cached = self._clusters.get(cluster)
            if cached is not None:
                return cached
            described = self._describe(cluster)
            self._clusters[cluster] = described
            return described

    def _describe(self, cluster: str) -> ClusterEndpoint:
        try:
            response = self._eks.describe_cluster(name=cluster)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = str(error.get("Message", ""))
            if code == "ResourceNotFoundException":
                raise ConfigurationError(f"EKS cluster {cluster!r} does not exist: {message}") from exc
            if code in ("AccessDeniedException", "UnauthorizedOperation"):
                raise ConfigurationError(
                    f"not allowed to describe EKS cluster {cluster!r}: {message}"
                ) from exc
            raise KubernetesApiUnavailableError(
                f"eks:DescribeCluster {cluster!r} failed: {code}: {message}"
            ) from exc
        except BotoCoreError as exc:
            raise KubernetesApiUnavailableError(f"eks:DescribeCluster {cluster!r} failed: {exc}") from exc
        info = response.get("cluster") or {}
        endpoint = info.get("endpoint")
        ca_data = (info.get("certificateAuthority") or {}).get("data")
        if not endpoint or not ca_data:
            # A cluster still CREATING has neither; acting on it is not possible yet.
            status = info.get("status", "unknown")
            raise KubernetesApiUnavailableError(
                f"EKS cluster {cluster!r} has no endpoint or CA yet (status {status})"
            )
        try:
            ca_pem = base64.b64decode(ca_data, validate=True).decode("ascii")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"EKS cluster {cluster!r} returned a malformed CA: {exc}") from exc
        return ClusterEndpoint(name=cluster, endpoint=str(endpoint), ca_pem=ca_pem)


__all__ = [
    "CLUSTER_ID_HEADER",
    "PRESIGN_EXPIRES_SECONDS",
    "REFRESH_MARGIN",
    "TOKEN_LIFETIME",
    "TOKEN_PREFIX",
    "ClusterDirectory",
    "ClusterEndpoint",
    "CredentialSource",
    "EksToken",
    "EksTokenSource",
    "decode_token",
    "encode_token",
    "presign_get_caller_identity",
    "sts_endpoint",
]
