"""How NodeHeal's remediation adapters reach a Kubernetes API server: JSON over HTTPS, nothing more.

The adapters (:mod:`nodeheal.kube.nodes`, :mod:`nodeheal.kube.pods`) send JSON and read JSON; they
never use the generated models of the ``kubernetes`` package, whose strict validation must not be
able to fail a remediation. What they need from a client is a connection pool to one API server,
TLS verified against the cluster's CA, a bearer token looked up per request, bounded retries of
connects only, and per-request timeouts. :class:`HttpTransport` is exactly that, over urllib3,
which botocore has already loaded in every Lambda container.

Why not the generated ``ApiClient``: importing it loads pydantic, the generated response types and
``kubernetes.utils`` (with PyYAML), about 100 ms of each cold start of the six Lambda functions
that talk to the API server, for code they never run. The ``nodeheal`` CLI still accepts a
kubeconfig, whose exec plugins and client certificates only the ``kubernetes`` package handles:
:class:`GeneratedClientTransport` lets the same adapters run over such a client.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

import urllib3
from urllib3.util.retry import Retry

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
    ) -> RawResponse: ...


def request_url(host: str, path: str, query: Sequence[tuple[str, str]]) -> str:
    """``host`` + ``path`` with the query percent-encoded as the generated client encodes it
    (``spec.nodeName=x`` travels as ``spec.nodeName%3Dx``)."""
    url = host.rstrip("/") + path
    return f"{url}?{urlencode(list(query), safe='/', quote_via=quote)}" if query else url


def _headers(body: Mapping[str, Any] | None, content_type: str) -> dict[str, str]:
    """JSON accepted; the content type only when there is a body to describe."""
    return {"Accept": JSON, "Content-Type": content_type} if body is not None else {"Accept": JSON}


def _urllib3_timeout(timeout: RequestTimeout) -> urllib3.Timeout:
    if isinstance(timeout, tuple):
        connect, read = timeout
        return urllib3.Timeout(connect=connect, read=read)
    return urllib3.Timeout(total=timeout)


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
    """

    def __init__(
        self,
        host: str,
        *,
        retries: Retry,
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
        self._retries = retries
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

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        timeout: RequestTimeout = 30.0,
    ) -> RawResponse:
        headers = {**_headers(body, content_type), "User-Agent": self.user_agent}
        encoded = json.dumps(body, separators=(",", ":")).encode("utf-8") if body is not None else None
        token = self._bearer_token() if self._bearer_token is not None else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        response = self._pool.request(
            method,
            request_url(self.host, path, query),
            body=encoded,
            headers=headers,
            timeout=_urllib3_timeout(timeout),
            retries=self._retries,
            # The API server does not redirect; a 3xx is an answer to report, not to follow.
            redirect=False,
            preload_content=True,
        )
        return RawResponse(status=int(response.status), reason=str(response.reason or ""), data=response.data)


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
    ) -> RawResponse:
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
            response = self.api_client.call_api(*serialized, _request_timeout=timeout)
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
