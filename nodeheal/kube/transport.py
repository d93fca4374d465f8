"""How NodeHeal's remediation adapters reach a Kubernetes API server: JSON over HTTPS, nothing more.

The adapters (:mod:`nodeheal.kube.nodes`, :mod:`nodeheal.kube.pods`) send JSON and read JSON; they
never use the generated models of the ``kubernetes`` package, whose strict validation must not be
able to fail a remediation. What they need from a client is a connection pool to one API server,
TLS verified against the cluster's CA, a bearer token looked up per request, bounded retries of
connects only, and per-request timeouts cut to the invocation's :class:`~nodeheal.deadline.Deadline`.
:class:`HttpTransport` is exactly that, over urllib3, which botocore has already loaded in every
Lambda container.

What bounds one request: the pool wait, the connect and the read each last at most the configured
timeout and at most the time the deadline leaves, and all of them together at most that time
(urllib3's ``total``). A connect that fails before anything was sent is tried again after a short
pause, only while the pause and another attempt still fit before the deadline. urllib3's read
timeout bounds each wait for bytes, not the whole body: an API server that trickles an answer byte
by byte could run past it, and only the Lambda timeout stops that; the API server writes a JSON
body at once, so this does not happen with it.

Why not the generated ``ApiClient``: importing it loads pydantic, the generated response types and
``kubernetes.utils`` (with PyYAML), about 100 ms of each cold start of the six Lambda functions
that talk to the API server, for code they never run. The ``nodeheal`` CLI still accepts a
kubeconfig, whose exec plugins and client certificates only the ``kubernetes`` package handles:
:class:`GeneratedClientTransport` lets the same adapters run over such a client.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

import urllib3

from nodeheal.deadline import MIN_CALL_SECONDS, UNBOUNDED, Deadline

#: (connect, read) seconds, or one number for both.
RequestTimeout = float | tuple[float, float]
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class RawResponse:
    """An HTTP answer as it came: status, reason phrase and the body's bytes."""

    status: int
    reason: str
    data: bytes


class ApiServerUnreachableError(Exception):
    """No HTTP answer came back (TLS failure, refused connection...) on a transport that reports
    such failures as its own exception rather than as urllib3's or the socket's."""


class KubeTransport(Protocol):
    """One request to the API server; HTTP error statuses are answers, not exceptions."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: Mapping[str, Any] | None,
        content_type: str,
        timeout: RequestTimeout,
        deadline: Deadline = UNBOUNDED,
    ) -> RawResponse: ...


def request_url(host: str, path: str, query: Sequence[tuple[str, str]]) -> str:
    """``host`` + ``path`` with the query percent-encoded as the generated client encodes it
    (``spec.nodeName=x`` travels as ``spec.nodeName%3Dx``)."""
    url = host.rstrip("/") + path
    return f"{url}?{urlencode(list(query), safe='/', quote_via=quote)}" if query else url


def _headers(body: Mapping[str, Any] | None, content_type: str) -> dict[str, str]:
    """JSON accepted; the content type only when there is a body to describe."""
    return {"Accept": JSON, "Content-Type": content_type} if body is not None else {"Accept": JSON}


def bounded_timeout(timeout: RequestTimeout, deadline: Deadline) -> RequestTimeout:
    """``timeout`` with each part cut to the time ``deadline`` leaves."""
    if isinstance(timeout, tuple):
        connect, read = timeout
        return (deadline.cap(connect), deadline.cap(read))
    return deadline.cap(timeout)


def _urllib3_timeout(timeout: RequestTimeout, deadline: Deadline) -> urllib3.Timeout:
    bounded = bounded_timeout(timeout, deadline)
    if isinstance(bounded, tuple):
        connect, read = bounded
        # ``total`` caps connect and read together, so a slow connect leaves less time to read.
        total = deadline.cap(connect + read) if deadline.bounded else None
        return urllib3.Timeout(connect=connect, read=read, total=total)
    return urllib3.Timeout(total=bounded)


def _environment_proxy(url: str) -> str | None:
    """The proxy ``HTTPS_PROXY``/``HTTP_PROXY`` name for ``url``, unless ``NO_PROXY`` exempts its host.

    Read as boto3 and the ``kubernetes`` client read them, so a machine behind an egress proxy
    reaches the API server the same way it reaches AWS.
    """
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxy


class HttpTransport:
    """A connection pool to one API server.

    ``bearer_token`` is called before every request, so a token source that re-mints expiring
    tokens (EKS IAM tokens live 15 minutes) keeps a transport cached for hours authenticated.
    ``ca_cert_file`` is a path to a PEM bundle and ``ca_cert_data`` the PEM text itself.

    Only a connect that failed (refused, unresolvable, timed out) is tried again, up to
    ``connect_retries`` times after pauses of ``backoff_seconds``, doubling: nothing reached the
    API server, so nothing can happen twice. A read that timed out is not repeated (that would
    double the wait inside a Lambda) and a POST or PATCH whose outcome is unknown is never re-sent:
    backoff-and-retry of those belongs to the state machine, which records every attempt. urllib3
    already drops pooled connections the peer closed before reusing them.
    """

    def __init__(
        self,
        host: str,
        *,
        connect_retries: int,
        backoff_seconds: float,
        pool_size: int,
        user_agent: str,
        verify: bool = True,
        ca_cert_file: str | None = None,
        ca_cert_data: str | None = None,
        bearer_token: Callable[[], str | None] | None = None,
    ) -> None:
        self.host = host.rstrip("/")
        self.verify = verify
        self.ca_cert_data = ca_cert_data
        self.ca_cert_file = ca_cert_file
        self.user_agent = user_agent
        self._connect_retries = connect_retries
        self._backoff_seconds = backoff_seconds
        self._bearer_token = bearer_token
        pool_args: dict[str, Any] = {
            "maxsize": pool_size,
            # A drain's parallel evictions share the pool: wait for a free connection rather than
            # open one that would be thrown away after the request.
            "block": True,
            "cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE",
            "ca_certs": ca_cert_file,
            "ca_cert_data": ca_cert_data,
        }
        proxy = _environment_proxy(self.host)
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(proxy, **pool_args) if proxy else urllib3.PoolManager(**pool_args)
        )

    def bearer_token(self) -> str | None:
        """The token the next request would carry (a fresh one from a re-minting source); None
        without one. For a client that must open its own connection, as a WebSocket does."""
        return self._bearer_token() if self._bearer_token is not None else None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        timeout: RequestTimeout = 30.0,
        deadline: Deadline = UNBOUNDED,
    ) -> RawResponse:
        headers = {**_headers(body, content_type), "User-Agent": self.user_agent}
        encoded = json.dumps(body, separators=(",", ":")).encode("utf-8") if body is not None else None
        token = self._bearer_token() if self._bearer_token is not None else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = request_url(self.host, path, query)
        failed_connects = 0
        while True:
            try:
                response = self._pool.request(
                    method,
                    url,
                    body=encoded,
                    headers=headers,
                    timeout=_urllib3_timeout(timeout, deadline),
                    # Waiting for a free pooled connection counts against the deadline too.
                    pool_timeout=max(deadline.remaining(), 0.0) if deadline.bounded else None,
                    retries=False,
                    # The API server does not redirect; a 3xx is an answer to report, not to follow.
                    redirect=False,
                    preload_content=True,
                )
            except urllib3.exceptions.ConnectTimeoutError:
                # NewConnectionError and NameResolutionError are ConnectTimeoutErrors as well.
                failed_connects += 1
                pause = self._backoff_seconds * 2 ** (failed_connects - 1)
                if failed_connects > self._connect_retries or not deadline.allows(pause + MIN_CALL_SECONDS):
                    raise
                time.sleep(pause)
                continue
            return RawResponse(
                status=int(response.status), reason=str(response.reason or ""), data=response.data
            )


class GeneratedClientTransport:
    """The same requests over a ``kubernetes.client.ApiClient`` (a kubeconfig-built client).

    Imports nothing of ``kubernetes`` itself: whoever built the client has loaded the package.
    """

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        timeout: RequestTimeout = 30.0,
        deadline: Deadline = UNBOUNDED,
    ) -> RawResponse:
        """The client's own retry settings (its ``Configuration.retries``) apply; only the CLI builds
        this transport, and the CLI has no deadline but its user's patience."""
        from kubernetes.client.exceptions import ApiException

        headers = _headers(body, content_type)
        try:
            serialized = self.api_client.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query) or None,
                header_params=headers,
                body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(
                *serialized, _request_timeout=bounded_timeout(timeout, deadline)
            )
        except ApiException as exc:
            # The client's REST layer raises status 0 for failures below HTTP (TLS, for one).
            if not exc.status:
                raise ApiServerUnreachableError(str(exc.reason or exc)) from exc
            body_text = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
            return RawResponse(status=int(exc.status), reason=str(exc.reason or ""), data=body_text)
        # The urllib3 response was not preloaded: reading ``data`` consumes it and frees the connection.
        return RawResponse(
            status=int(response.status),
            reason=str(response.reason or ""),
            data=bytes(response.response.data or b""),
        )
