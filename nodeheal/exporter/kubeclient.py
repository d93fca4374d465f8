"""The exporter's Kubernetes adapter: raw JSON over the ``kubernetes`` client's authenticated transport.

The client's generated API methods deserialize every response into pydantic models; for a watch of
5,000 Nodes of ~15 KB that costs several times the CPU of the transition logic itself (see
``benchmarks/exporter_throughput.py``). The adapter therefore asks for raw responses
(``_preload_content=False`` semantics) and parses JSON itself, while still using the client for
what it is good at: kubeconfig / in-cluster configuration, token refresh, TLS and the pool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from nodeheal.errors import ConfigurationError

__all__ = ["ApiException", "KubeJsonClient", "load_api_client"]


def load_api_client(kubeconfig: str = "", context: str = "") -> Any:
    """In-cluster service account when running in a pod, else the kubeconfig (flag or $KUBECONFIG)."""
    configuration = k8s_client.Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig or None,
                context=context or None,
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError) as exc:
        raise ConfigurationError(f"cannot load Kubernetes configuration: {exc}") from exc
    return k8s_client.ApiClient(configuration)


class KubeJsonClient:
    """GET/POST/PUT and watch streams as plain JSON dicts."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        params = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v not in (None, "")],
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*params, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        response = self._call(method, path, query=query, body=body, timeout=timeout)
        data = response.read()
        parsed = json.loads(data) if data else {}
        if not isinstance(parsed, dict):
            raise ApiException(status=response.status, reason="response is not a JSON object")
        return parsed

    def open_stream(
        self, path: str, *, query: Mapping[str, Any], connect_timeout: float, read_timeout: float
    ) -> Any:
        """Open a watch; returns the urllib3 response for :func:`iter_lines` and ``shutdown``."""
        response = self._call("GET", path, query=query, timeout=(connect_timeout, read_timeout))
        return response.response


def iter_lines(response: Any) -> Iterator[bytes]:
    """Split a watch stream into its newline-delimited JSON events, as bytes (json.loads takes them)."""
    buffer = b""
    for chunk in _chunks(response):
        buffer += chunk
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            line = buffer[:newline]
            buffer = buffer[newline + 1 :]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _chunks(response: Any) -> Iterator[bytes]:
    # The API server streams watches with chunked encoding: yield each chunk as it arrives. Without
    # it, read1() returns whatever bytes are available; read(amt) would wait for amt bytes or EOF.
    if getattr(response, "chunked", False):
        yield from response.stream(amt=None, decode_content=True)
        return
    while True:
        data = response.read1(65536)
        if not data:
            return
        yield data
