"""The remediation functions' HTTP transport: what goes on the wire, TLS, proxies, and what it imports."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeheal.errors import KubernetesApiUnavailableError
from nodeheal.kube.client import StaticClientProvider, http_transport, request_json
from nodeheal.kube.transport import request_url
from tests.unit.adapters.scripted_server import Reply, Script, scripted_server

ROOT = Path(__file__).resolve().parents[3]
NODE_LIST = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    with scripted_server() as running:
        yield running


@pytest.mark.parametrize(
    "query",
    [
        [("fieldSelector", "spec.nodeName=ip-10-0-1-2.us-west-2.compute.internal"), ("limit", "500")],
        [("labelSelector", "karpenter.sh/nodepool in (gpu,train),!nodeheal.io/disabled")],
        [("continue", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTB9+/=="), ("dryRun", "All")],
    ],
)
def test_query_is_encoded_exactly_as_the_generated_client_encodes_it(query: list[tuple[str, str]]) -> None:
    generated = kubernetes.client.ApiClient(kubernetes.client.Configuration(host="https://k8s.example"))
    _, url, *_ = generated.param_serialize(method="GET", resource_path="/api/v1/pods", query_params=query)
    assert request_url("https://k8s.example/", "/api/v1/pods", query) == url


def test_request_sends_json_with_nodeheal_headers_and_a_token_per_request(server: tuple[str, Script]) -> None:
    host, script = server
    tokens = iter(["first", "second"])
    transport = http_transport(host, bearer_token=lambda: next(tokens))
    script.add(Reply(200, {"kind": "Node"}), Reply(200, NODE_LIST))

    patched = transport.request(
        "PATCH",
        "/api/v1/nodes/n",
        query=(),
        body={"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
        timeout=(2.0, 5.0),
    )
    listed = transport.request("GET", "/api/v1/nodes", query=[("limit", "1")], body=None, timeout=5.0)

    assert (patched.status, json.loads(patched.data)) == (200, {"kind": "Node"})
    assert listed.status == 200
    first, second = script.requests
    assert (first.method, first.path, first.body) == (
        "PATCH",
        "/api/v1/nodes/n",
        {"spec": {"unschedulable": True}},
    )
    assert first.headers["content-type"] == "application/merge-patch+json"
    assert first.headers["accept"] == "application/json"
    assert first.headers["user-agent"] == "nodeheal"
    assert first.headers["authorization"] == "Bearer first"
    assert second.headers["authorization"] == "Bearer second"
    assert "content-type" not in second.headers
    assert second.query == {"limit": "1"}


def test_error_statuses_and_redirects_are_answers_not_exceptions(server: tuple[str, Script]) -> None:
    host, script = server
    transport = StaticClientProvider(host).transport("any")
    script.add(Reply(404, {"kind": "Status", "code": 404}), Reply(307, b"", content_type="text/plain"))
    missing = request_json(transport, "GET", "/api/v1/nodes/gone", action="get node gone")
    moved = request_json(transport, "GET", "/api/v1/nodes", action="list nodes")
    assert (missing.status, missing.body["code"]) == (404, 404)
    assert (moved.status, moved.body) == (307, None)
    assert len(script.requests) == 2  # the redirect was reported, not followed


# -- TLS: the cluster CA as PEM text, the way EKS hands it out -----------------------------------


def _self_signed(tmp: Path) -> tuple[str, ssl.SSLContext]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    (tmp / "server.pem").write_text(pem)
    (tmp / "server.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "server.pem", tmp / "server.key")
    return pem, context


def test_tls_is_verified_against_the_cluster_ca(tmp_path: Path) -> None:
    ca_pem, server_context = _self_signed(tmp_path)
    with scripted_server(tls=server_context) as (host, script):
        script.add(Reply(200, NODE_LIST))
        trusted = StaticClientProvider(host, ca_cert_data=ca_pem).transport("c")
        assert request_json(trusted, "GET", "/api/v1/nodes", action="list nodes").status == 200

        from_file = StaticClientProvider(host, ca_cert=str(tmp_path / "server.pem")).transport("c")
        script.add(Reply(200, NODE_LIST))
        assert request_json(from_file, "GET", "/api/v1/nodes", action="list nodes").status == 200

        # Without the cluster CA the certificate is not trusted: no request reaches the server.
        untrusted = StaticClientProvider(host).transport("c")
        with pytest.raises(KubernetesApiUnavailableError, match="list nodes: API server unreachable"):
            request_json(untrusted, "GET", "/api/v1/nodes", action="list nodes")
        assert len(script.requests) == 2


# -- proxies from the environment, as boto3 and the kubernetes client read them ------------------


def test_requests_go_through_the_environment_proxy(
    server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, script = server
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    script.add(Reply(200, NODE_LIST))
    # The API server's name is never resolved here: the request is handed to the proxy.
    transport = http_transport("http://api.cluster.example")
    response = request_json(transport, "GET", "/api/v1/nodes", action="list nodes")
    assert response.status == 200
    (seen,) = script.requests
    assert seen.target == "http://api.cluster.example/api/v1/nodes"
    assert seen.headers["host"] == "api.cluster.example"


def test_no_proxy_exempts_the_api_server(server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    host, script = server
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # would refuse the connection if used
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    script.add(Reply(200, NODE_LIST))
    assert request_json(http_transport(host), "GET", "/api/v1/nodes", action="list nodes").status == 200
    assert script.requests[0].target == "/api/v1/nodes"


# -- what a remediation function's container loads ------------------------------------------------

IMPORT_PROBE = """
import importlib, json, pkgutil, sys
import lambdas
for module in pkgutil.iter_modules(lambdas.__path__):
    importlib.import_module(f"lambdas.{module.name}")
from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.nodes import NodeOperations
from nodeheal.kube.pods import PodOperations
from nodeheal.runtime import LambdaEnvironment, Runtime
from nodeheal.deadline import UNBOUNDED
runtime = Runtime(
    LambdaEnvironment(region="us-west-2"),
    client_factory=lambda service: None,
    kube_provider_factory=lambda: StaticClientProvider("https://127.0.0.1:1"),
)
access = runtime.kube("training-on-eks", UNBOUNDED)
assert isinstance(access.nodes, NodeOperations) and isinstance(access.pods, PodOperations)
print(json.dumps({name: name in sys.modules for name in ("kubernetes", "pydantic", "yaml")}))
"""


def test_remediation_functions_never_load_the_kubernetes_package() -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_REGION": "us-west-2"}
    completed = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    assert loaded == {"kubernetes": False, "pydantic": False, "yaml": False}
