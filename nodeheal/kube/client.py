"""Kubernetes API clients: where they come from (EKS or a static endpoint) and how NodeHeal calls them.

Providers hand out one :class:`~nodeheal.kube.transport.HttpTransport` per cluster and keep it for
the life of the container, so its connection pool (and TLS sessions) survive between invocations.

:func:`request_json` is the one way NodeHeal's adapters talk to the API server: it sends JSON and
returns the status code with the parsed body, never a generated model. The ``kubernetes`` client's
models validate every response strictly, and a field they do not know (or an object a controller
has only partly filled in) must not be able to fail a remediation.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nodeheal.deadline import UNBOUNDED, Deadline
from nodeheal.errors import ConfigurationError, KubernetesApiError
from nodeheal.kube.api_errors import (
    TRANSPORT_ERRORS,
    ApiStatus,
    error_for_exception,
    error_for_status,
    status_from_body,
)
from nodeheal.kube.eks_auth import Clock, ClusterDirectory, CredentialSource, EksTokenSource
from nodeheal.kube.transport import JSON, HttpTransport, KubeTransport, RequestTimeout
from nodeheal.timestamps import utc_now

logger = logging.getLogger(__name__)

#: (connect, read) seconds. An API server that does not answer in this time is treated as
#: unavailable, so the state machine's retry, not the Lambda timeout, decides what happens next.
#: The read allows for admission webhooks, whose own timeout may be up to 30 s. Inside a Lambda each
#: part is further cut to the invocation's remaining time (:class:`~nodeheal.deadline.Deadline`).
DEFAULT_REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)

#: Connect attempts after the first, and the first pause between them (doubling): 0.1, 0.2, 0.4 s.
#: Only connects are retried in-process (see :class:`~nodeheal.kube.transport.HttpTransport`).
CONNECT_RETRIES = 3
CONNECT_BACKOFF_SECONDS = 0.1

#: Upper bound of parallel requests NodeHeal makes over one client (eviction fan-out). The pool is
#: sized to it so connections are reused instead of opened and thrown away per request.
CONNECTION_POOL_SIZE = 32

#: Objects per page when listing: large GPU fleets are thousands of nodes with big status blocks.
LIST_PAGE_SIZE = 500
#: What the API server answers for a continue token whose revision etcd has compacted (410 Gone).
HTTP_GONE = 410

USER_AGENT = "nodeheal"
MERGE_PATCH = "application/merge-patch+json"


class KubeClientProvider(Protocol):
    def transport(self, cluster: str) -> KubeTransport: ...


def http_transport(
    host: str,
    *,
    verify: bool = True,
    ca_cert_file: str | None = None,
    ca_cert_data: str | None = None,
    bearer_token: Callable[[], str | None] | None = None,
) -> HttpTransport:
    """A transport with NodeHeal's client settings: retries, pool size, and a user agent that names
    NodeHeal in the API server's audit log, so a person can tell its writes from others'."""
    return HttpTransport(
        host,
        connect_retries=CONNECT_RETRIES,
        backoff_seconds=CONNECT_BACKOFF_SECONDS,
        pool_size=CONNECTION_POOL_SIZE,
        user_agent=USER_AGENT,
        verify=verify,
        ca_cert_file=ca_cert_file,
        ca_cert_data=ca_cert_data,
        bearer_token=bearer_token,
    )


class EksClientProvider:
    """Transports to EKS clusters: endpoint and CA from ``eks:DescribeCluster``, IAM bearer tokens.

    The token is looked up on every request and re-minted a minute before its 15-minute lifetime
    ends, so a transport cached for hours never sends an expired token.
    """

    def __init__(
        self,
        eks_client: Any,
        signing_session: CredentialSource,
        clock: Clock = utc_now,
        *,
        region: str | None = None,
    ) -> None:
        region_name = region or getattr(getattr(eks_client, "meta", None), "region_name", None)
        if not region_name:
            raise ConfigurationError("the EKS client has no region; pass region= explicitly")
        self._directory = ClusterDirectory(eks_client)
        self._tokens = EksTokenSource(signing_session, region=str(region_name), clock=clock)
        self._transports: dict[str, HttpTransport] = {}
        self._lock = threading.Lock()

    @property
    def tokens(self) -> EksTokenSource:
        return self._tokens

    def transport(self, cluster: str) -> HttpTransport:
        with self._lock:
            transport = self._transports.get(cluster)
            if transport is None:
                transport = self._build(cluster)
                self._transports[cluster] = transport
            return transport

    def _build(self, cluster: str) -> HttpTransport:
        endpoint = self._directory.get(cluster)
        tokens = self._tokens
        # CA as data, not a temporary file: nothing to clean up, nothing for /tmp to lose.
        return http_transport(
            endpoint.endpoint,
            verify=True,
            ca_cert_data=endpoint.ca_pem,
            bearer_token=lambda: tokens.token(cluster),
        )


class StaticClientProvider:
    """One transport for a fixed endpoint: the local simulation, or a kubeconfig-style setup.

    ``ca_cert`` is a path to a PEM bundle and ``ca_cert_data`` the PEM text itself; give at most one.
    Every cluster name maps to the same transport.
    """

    def __init__(
        self,
        host: str,
        token: str | None = None,
        ca_cert: str | None = None,
        verify: bool = True,
        *,
        ca_cert_data: str | None = None,
    ) -> None:
        if ca_cert and ca_cert_data:
            raise ConfigurationError("give either ca_cert (a path) or ca_cert_data (PEM text), not both")
        self._transport = http_transport(
            host,
            verify=verify,
            ca_cert_file=ca_cert,
            ca_cert_data=ca_cert_data,
            bearer_token=(lambda: token) if token else None,
        )

    def transport(self, cluster: str) -> HttpTransport:
        return self._transport


@dataclass(frozen=True, slots=True)
class JsonResponse:
    status: int
    #: Parsed JSON body; None when the body was empty or not JSON.
    body: Any
    http_reason: str = ""
    raw: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    @property
    def api_status(self) -> ApiStatus:
        return status_from_body(
            self.status, self.body if self.body is not None else self.raw, self.http_reason
        )

    def object(self, action: str) -> dict[str, Any]:
        """The body of a successful response as a JSON object."""
        if not isinstance(self.body, dict):
            raise KubernetesApiError(f"{action}: HTTP {self.status} with a body that is not a JSON object")
        return self.body


def request_json(
    transport: KubeTransport,
    method: str,
    path: str,
    *,
    action: str,
    query: Sequence[tuple[str, str]] = (),
    body: Mapping[str, Any] | None = None,
    content_type: str = JSON,
    timeout: RequestTimeout = DEFAULT_REQUEST_TIMEOUT,
    deadline: Deadline = UNBOUNDED,
) -> JsonResponse:
    """Send one request and return its status and parsed body, whatever the status.

    Transport failures (timeouts, refused or dropped connections, TLS errors) are raised as
    :class:`KubernetesApiUnavailableError`; HTTP error statuses are returned for the caller to
    classify, because what a 404 or a 429 means depends on the request. With a ``deadline``, a
    request is not started when too little time is left, its timeouts are cut to the time left, and
    a failure that ran into the deadline is :class:`~nodeheal.errors.DeadlineExceededError`.
    """
    deadline.check(action)
    try:
        response = transport.request(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
            deadline=deadline,
        )
    except TRANSPORT_ERRORS as exc:
        if deadline.cut_short():
            raise deadline.exceeded(action, exc) from exc
        raise error_for_exception(exc, action=action) from exc
    parsed: Any = None
    if response.data:
        try:
            parsed = json.loads(response.data)
        except ValueError:
            parsed = None
    return JsonResponse(status=response.status, body=parsed, http_reason=response.reason, raw=response.data)


class ApiOperations:
    """Base of the adapters (nodes, pods): one transport, one request timeout, one deadline for
    every request they send (the deadline is per Lambda invocation, the transport per container),
    and one page size for the lists they read."""

    def __init__(
        self,
        transport: KubeTransport,
        *,
        timeout: RequestTimeout = DEFAULT_REQUEST_TIMEOUT,
        deadline: Deadline = UNBOUNDED,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self._api = transport
        self._timeout = timeout
        self._deadline = deadline
        self._page_size = page_size

    def _request(
        self,
        method: str,
        path: str,
        *,
        action: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
    ) -> JsonResponse:
        """One request with this object's timeout, bounded by its deadline."""
        return request_json(
            self._api,
            method,
            path,
            action=action,
            query=query,
            body=body,
            content_type=content_type,
            timeout=self._timeout,
            deadline=self._deadline,
        )

    def _list(self, path: str, *, action: str, query: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        """Every object of a collection, a page at a time.

        The server reads every page after the first at the first page's resourceVersion, so the
        pages add up to one consistent list; but etcd compacts that revision after 5 to 10
        minutes, and the next page is then 410 Gone. The list then starts over, whole and
        unpaged, so it cannot expire again: what client-go's pager does
        (``ListPager.FullListIfExpired`` in k8s.io/client-go tools/pager/pager.go). Mixing the
        pages already read with pages of a newer revision would give an inconsistent list.
        """
        items: list[dict[str, Any]] = []
        continue_token = ""
        while True:
            page_query = [*query, ("limit", str(self._page_size))]
            if continue_token:
                page_query.append(("continue", continue_token))
            response = self._request("GET", path, action=action, query=page_query)
            if response.status == HTTP_GONE and continue_token:
                logger.warning(
                    "%s: the list's snapshot expired after %d objects (410); listing again, whole",
                    action,
                    len(items),
                )
                body = expect_success(self._request("GET", path, action=action, query=query), action=action)
                return _items(body)
            body = expect_success(response, action=action)
            items.extend(_items(body))
            continue_token = str((body.get("metadata") or {}).get("continue") or "")
            if not continue_token:
                return items


def _items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [item for item in body.get("items") or [] if isinstance(item, dict)]


def expect_success(response: JsonResponse, *, action: str) -> dict[str, Any]:
    """The JSON object of a 2xx response; the mapped domain error otherwise."""
    if not response.ok:
        raise error_for_status(response.api_status, action=action)
    return response.object(action)
