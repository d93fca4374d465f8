"""``pods/exec`` over WebSocket with the real ``kubernetes`` client (``kubernetes.stream``) and
its WebSocket client: the container chosen before the upgrade, the subprotocol negotiated, output on
channels 1 and 2, and the end ``Status`` on channel 3 (see ``nodeheal.sim.apiserver.podexec``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import WSClient

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, make_pod
from nodeheal.sim.apiserver.podexec import ExecResult

NS = "gpu-operator"


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    two = make_pod("two", NS, "gpu-a")
    two["spec"]["containers"].append({**two["spec"]["containers"][0], "name": "sidecar"})
    store.add(make_node("gpu-a", instance_id="i-0a"), make_pod("one", NS, "gpu-a"), two)

    def run(pod: dict[str, Any], container: str, argv: Sequence[str]) -> ExecResult:
        if argv[0] == "fail":
            return ExecResult(3, stderr="went wrong\n")
        return ExecResult(0, stdout=f"{pod['metadata']['name']}/{container}: {' '.join(argv)}\n")

    store.run_exec(run)
    with FakeKubeApiServer(store) as srv:
        yield srv
    store.close()


def execute(core: client.CoreV1Api, pod: str, argv: list[str], **options: Any) -> Any:
    socket = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        NS,
        command=argv,
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
        **options,
    )
    socket.run_forever(timeout=10)
    return socket


def test_the_only_container_runs_the_command_and_succeeds(core: client.CoreV1Api) -> None:
    socket = execute(core, "one", ["dcgmi", "test", "--inject"])
    assert not socket.is_open()
    assert socket.subprotocol == "v5.channel.k8s.io", "the client's first choice"
    assert socket.read_channel(1) == "one/main: dcgmi test --inject\n"
    assert socket.returncode == 0


def test_a_nonzero_exit_comes_back_as_the_status_cause(core: client.CoreV1Api) -> None:
    socket = execute(core, "one", ["fail"])
    assert socket.read_channel(2) == "went wrong\n"
    assert socket.returncode == 3


def test_a_pod_with_two_containers_needs_one_named(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as refused:
        execute(core, "two", ["true"])
    assert "400" in str(refused.value.reason)
    assert "a container name must be specified for pod two, choose one of: [main sidecar]" in str(
        refused.value.reason
    )
    assert execute(core, "two", ["true"], container="sidecar").read_channel(1) == "two/sidecar: true\n"
    with pytest.raises(ApiException) as unknown:
        execute(core, "two", ["true"], container="nope")
    assert "container nope is not valid for pod two" in str(unknown.value.reason)


def test_an_unknown_pod_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:
        execute(core, "ghost", ["true"])
    reason = str(missing.value.reason)
    assert reason.startswith("Handshake status 404") and '"reason":"NotFound"' in reason


def test_a_v4_client_gets_v4_frames(server: FakeKubeApiServer) -> None:
    """A client that offers only v4 (older kubernetes clients) is answered in v4."""
    api = server.api_client()
    url = (
        server.url.replace("http://", "ws://")
        + f"/api/v1/namespaces/{NS}/pods/one/exec?command=echo&stdout=true"
    )
    socket = WSClient(api.configuration, url, {"sec-websocket-protocol": "v4.channel.k8s.io"}, True)
    socket.run_forever(timeout=10)
    assert not socket.is_open()
    assert socket.subprotocol == "v4.channel.k8s.io"
    assert socket.read_channel(1) == "one/main: echo\n"
    assert socket.returncode == 0
