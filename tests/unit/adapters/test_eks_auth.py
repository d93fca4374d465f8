"""EKS bearer token and cluster discovery."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.auth
import pytest
from botocore.credentials import Credentials
from botocore.stub import Stubber

from nodeheal.errors import ConfigurationError, KubernetesApiUnavailableError
from nodeheal.kube.client import EksClientProvider, StaticClientProvider, request_json
from nodeheal.kube.eks_auth import (
    TOKEN_PREFIX,
    ClusterDirectory,
    EksTokenSource,
    decode_token,
    presign_get_caller_identity,
)

REGION = "us-west-2"
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
T0 = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class StaticCredentials:
    """A credential source (like boto3.Session) that counts how often it is asked."""

    def __init__(self) -> None:
        self.calls = 0

    def get_credentials(self) -> Credentials:
        self.calls += 1
        return Credentials("AKIDEXAMPLE", "secret", "session-token")


class RotatingCredentials(StaticCredentials):
    """Like a Lambda role's refreshable credentials: each fetch may carry a new session token."""

    def get_credentials(self) -> Credentials:
        self.calls += 1
        return Credentials("AKIDEXAMPLE", "secret", f"session-{self.calls}")


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def test_token_is_prefixed_unpadded_base64url_of_the_presigned_sts_url() -> None:
    source = EksTokenSource(StaticCredentials(), region=REGION, clock=FakeClock(T0))
    token = source.token("training-on-eks")

    assert token.startswith(TOKEN_PREFIX)
    payload = token[len(TOKEN_PREFIX) :]
    assert "=" not in payload
    assert "+" not in payload and "/" not in payload
    url = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    assert url == decode_token(token)

    parts = urlsplit(url)
    assert parts.scheme == "https"
    assert parts.netloc == "sts.us-west-2.amazonaws.com"
    assert parts.path == "/"
    assert parts.query.startswith("Action=GetCallerIdentity&Version=2011-06-15&")
    query = _query(url)
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-SignedHeaders"].split(";") == ["host", "x-k8s-aws-id"]
    assert query["X-Amz-Credential"].startswith("AKIDEXAMPLE/")
    assert query["X-Amz-Credential"].endswith(f"/{REGION}/sts/aws4_request")
    assert query["X-Amz-Security-Token"] == "session-token"
    assert len(query["X-Amz-Signature"]) == 64
    # The cluster id is a signed header, never hoisted into the query string.
    assert "x-k8s-aws-id" not in {k.lower() for k in query}
    assert "training-on-eks" not in url


def test_signature_matches_the_aws_cli_token_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same credentials and instant as ``aws eks get-token`` (an STS client whose handlers inject
    the header before signing) must give a byte-identical URL."""
    fixed = datetime(2026, 11, 21, 10, 0, 0)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *args, **kwargs: fixed)
    credentials = Credentials("AKIDEXAMPLE", "secret", "session-token")

    ours = presign_get_caller_identity(credentials, region=REGION, cluster="training-on-eks")

    session = boto3.Session(
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        aws_session_token="session-token",
        region_name=REGION,
    )
    sts = session.client("sts", endpoint_url=f"https://sts.{REGION}.amazonaws.com")

    def keep_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["x-k8s-aws-id"] = params.pop("x-k8s-aws-id")

    def add_header(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = request.context["x-k8s-aws-id"]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", keep_id)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    cli = sts.generate_presigned_url(
        "get_caller_identity", Params={"x-k8s-aws-id": "training-on-eks"}, ExpiresIn=60, HttpMethod="GET"
    )

    assert ours == cli


def test_token_differs_per_cluster_and_is_cached_per_cluster() -> None:
    credentials = StaticCredentials()
    source = EksTokenSource(credentials, region=REGION, clock=FakeClock(T0))
    a1 = source.token("a")
    b1 = source.token("b")
    assert a1 != b1
    assert source.token("a") == a1
    assert source.token("b") == b1
    assert credentials.calls == 2


def test_token_is_refreshed_a_minute_before_its_fifteen_minutes_end() -> None:
    clock = FakeClock(T0)
    credentials = StaticCredentials()
    source = EksTokenSource(credentials, region=REGION, clock=clock)

    first = source.get("c")
    assert first.expires_at == T0 + timedelta(minutes=15)

    clock.advance(minutes=13, seconds=59)
    assert source.get("c") is first
    assert credentials.calls == 1

    clock.advance(seconds=1)  # 14 minutes: inside the one-minute margin
    second = source.get("c")
    assert second is not first
    assert second.expires_at == clock.now + timedelta(minutes=15)
    assert credentials.calls == 2


def test_missing_credentials_is_a_configuration_error() -> None:
    class NoCredentials:
        def get_credentials(self) -> None:
            return None

    with pytest.raises(ConfigurationError, match="no AWS credentials"):
        EksTokenSource(NoCredentials(), region=REGION).token("c")


def test_china_regions_sign_against_the_china_sts_endpoint() -> None:
    url = presign_get_caller_identity(Credentials("AKIDEXAMPLE", "secret"), region="cn-north-1", cluster="c")
    assert urlsplit(url).netloc == "sts.cn-north-1.amazonaws.com.cn"


# -- DescribeCluster ------------------------------------------------------------------------------


def _describe_response(name: str, endpoint: str) -> dict[str, Any]:
    return {
        "cluster": {
            "name": name,
            "arn": f"arn:aws:eks:{REGION}:123456789012:cluster/{name}",
            "endpoint": endpoint,
            "status": "ACTIVE",
            "certificateAuthority": {"data": base64.b64encode(CA_PEM.encode()).decode()},
        }
    }


@pytest.fixture
def eks() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("eks", region_name=REGION)
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_describe_cluster_is_called_once_per_cluster(eks: tuple[Any, Stubber]) -> None:
    client, stubber = eks
    stubber.add_response("describe_cluster", _describe_response("a", "https://A.eks"), {"name": "a"})
    stubber.add_response("describe_cluster", _describe_response("b", "https://B.eks"), {"name": "b"})
    directory = ClusterDirectory(client)

    first = directory.get("a")
    assert first.endpoint == "https://A.eks"
    assert first.ca_pem == CA_PEM
    # A second DescribeCluster for "a" would find no stubbed response and fail.
    assert directory.get("a") is first
    assert directory.get("b").endpoint == "https://B.eks"


def test_describe_cluster_errors_map_to_domain_errors(eks: tuple[Any, Stubber]) -> None:
    client, stubber = eks
    stubber.add_client_error(
        "describe_cluster", "ResourceNotFoundException", "No cluster found for name: gone.", 404
    )
    stubber.add_client_error("describe_cluster", "ThrottlingException", "Rate exceeded", 429)
    directory = ClusterDirectory(client)
    with pytest.raises(ConfigurationError, match="'gone' does not exist"):
        directory.get("gone")
    with pytest.raises(KubernetesApiUnavailableError, match="ThrottlingException"):
        directory.get("busy")


def test_cluster_without_endpoint_yet_is_unavailable(eks: tuple[Any, Stubber]) -> None:
    client, stubber = eks
    stubber.add_response(
        "describe_cluster", {"cluster": {"name": "new", "status": "CREATING"}}, {"name": "new"}
    )
    with pytest.raises(KubernetesApiUnavailableError, match="status CREATING"):
        ClusterDirectory(client).get("new")


# -- EksClientProvider end to end: the bearer token on the wire ----------------------------------


class _HeaderRecorder(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        body = b'{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str | None]]]:
    _HeaderRecorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HeaderRecorder)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _HeaderRecorder.seen
    finally:
        server.shutdown()
        server.server_close()


def test_eks_provider_sends_a_fresh_bearer_token_and_reuses_the_client(
    eks: tuple[Any, Stubber], recorder: tuple[str, list[str | None]]
) -> None:
    client, stubber = eks
    host, seen = recorder
    stubber.add_response("describe_cluster", _describe_response("c", host), {"name": "c"})
    clock = FakeClock(T0)
    credentials = RotatingCredentials()
    provider = EksClientProvider(client, credentials, clock)

    api = provider.transport("c")
    assert provider.transport("c") is api
    assert api.host == host
    assert api.ca_cert_data == CA_PEM
    assert api.verify is True

    request_json(api, "GET", "/api/v1/nodes", action="list nodes")
    clock.advance(minutes=10)
    request_json(api, "GET", "/api/v1/nodes", action="list nodes")
    clock.advance(minutes=4, seconds=30)
    request_json(api, "GET", "/api/v1/nodes", action="list nodes")

    assert len(seen) == 3
    assert all(h is not None and h.startswith(f"Bearer {TOKEN_PREFIX}") for h in seen)
    assert seen[0] == seen[1]
    assert seen[2] != seen[1]
    assert credentials.calls == 2
    token = str(seen[2]).removeprefix("Bearer ")
    url = decode_token(token)
    assert urlsplit(url).netloc == f"sts.{REGION}.amazonaws.com"
    assert _query(url)["X-Amz-Security-Token"] == "session-2"


def test_static_provider_sends_its_token_and_ignores_the_cluster_name(
    recorder: tuple[str, list[str | None]],
) -> None:
    host, seen = recorder
    provider = StaticClientProvider(host, token="local-token")
    assert provider.transport("a") is provider.transport("b")
    response = request_json(provider.transport("a"), "GET", "/api/v1/nodes", action="list nodes")
    assert response.status == 200
    assert response.body["kind"] == "NodeList"
    assert seen == ["Bearer local-token"]


def test_static_provider_without_token_sends_no_authorization(recorder: tuple[str, list[str | None]]) -> None:
    host, seen = recorder
    request_json(StaticClientProvider(host).transport("x"), "GET", "/api/v1/nodes", action="list nodes")
    assert seen == [None]


def test_static_provider_rejects_two_cas() -> None:
    with pytest.raises(ConfigurationError):
        StaticClientProvider("https://k8s", ca_cert="/etc/ca.pem", ca_cert_data=CA_PEM)
