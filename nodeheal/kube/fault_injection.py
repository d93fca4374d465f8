"""Fault injection's Kubernetes side: the requests; injected_faults has the payload, commands.inject asks.

The requests of ``nodeheal inject`` (:mod:`nodeheal.commands.inject`). Three ways to make a detector
see a GPU fault (:mod:`nodeheal.injected_faults` has the manifests, the DCGM fields and their
sources):

* :func:`set_condition`: the strategic merge patch of ``/status`` that node-problem-detector's
  condition manager sends;
* :func:`write_kmsg`: a short-lived privileged pod bound to the node writes the driver's line into
  ``/dev/kmsg``; it is waited for (bounded) and always deleted;
* :func:`inject_dcgm`: ``dcgmi test --inject`` in the node's dcgm-exporter pod over ``pods/exec``,
  a WebSocket the ``kubernetes`` client speaks (:func:`generated_client`, :func:`exec_in_pod`).

Nothing here prints or reads the command line: the command passes what it was asked, and a
problem worth telling but not failing for (an injector pod that could not be deleted) goes to
``warn``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from nodeheal import injected_faults as detector
from nodeheal.errors import ConfigurationError, NodeHealError

if TYPE_CHECKING:
    from nodeheal.kube.transport import KubeTransport

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

Warn = Callable[[str], None]


class NodeNotFoundError(NodeHealError):
    """The node named on the command line does not exist in the cluster."""


class InjectionFailedError(NodeHealError):
    """The injector pod or the exec did not complete: nothing reached the detector (or not known to)."""


def _node_path(node: str) -> str:
    return f"/api/v1/nodes/{quote(node, safe='')}"


def read_node(api: KubeTransport, node: str, cluster: str) -> dict[str, Any]:
    """The Node object; NodeNotFoundError when the cluster has no such node."""
    from nodeheal.kube.client import expect_success, request_json

    response = request_json(api, "GET", _node_path(node), action=f"get node {node}")
    if response.status == 404:
        raise NodeNotFoundError(f"node {node} does not exist in cluster {cluster}")
    found: dict[str, Any] = expect_success(response, action=f"get node {node}")
    return found


def set_condition(api: KubeTransport, node: str, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Send NPD's strategic merge patch of the node's status; the patched Node."""
    from nodeheal.kube.client import expect_success, request_json

    action = f"patch the status of node {node}"
    patched: dict[str, Any] = expect_success(
        request_json(
            api,
            "PATCH",
            f"{_node_path(node)}/status",
            action=action,
            body=dict(patch),
            content_type=STRATEGIC_MERGE_PATCH,
        ),
        action=action,
    )
    return patched


# ---- kmsg ------------------------------------------------------------------------------------


def write_kmsg(
    api: KubeTransport,
    *,
    node: str,
    namespace: str,
    image: str,
    line: str,
    timeout: float,
    warn: Warn,
) -> dict[str, Any]:
    """Create the injector pod, wait (bounded) until it has run, and delete it whatever happened."""
    from nodeheal.kube.client import expect_success, request_json

    pods = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
    manifest = detector.kmsg_pod(node=node, namespace=namespace, line=line, image=image)
    created = expect_success(
        request_json(api, "POST", pods, action=f"create the injector pod in {namespace}", body=manifest),
        action=f"create the injector pod in {namespace}",
    )
    name = str(created["metadata"]["name"])
    try:
        pod = _wait_finished(api, f"{pods}/{quote(name, safe='')}", name, timeout)
    finally:
        _delete_pod(api, pods, name, warn)
    phase = str((pod.get("status") or {}).get("phase") or "")
    if phase != "Succeeded":
        raise InjectionFailedError(
            f"injector pod {namespace}/{name} ended {phase}{_terminated(pod)}: nothing was written to "
            f"{node}'s kernel log (it was deleted)"
        )
    return {"namespace": namespace, "pod": name, "phase": phase, "line": line, "deleted": True}


#: First and largest pause between two reads of the injector pod: it is done in a second or two.
_FIRST_POLL_SECONDS = 0.1
_MAX_POLL_SECONDS = 2.0


def _wait_finished(api: KubeTransport, path: str, name: str, timeout: float) -> dict[str, Any]:
    from nodeheal.kube.client import expect_success, request_json

    deadline = time.monotonic() + timeout
    pause = _FIRST_POLL_SECONDS
    while True:
        pod = expect_success(
            request_json(api, "GET", path, action=f"read pod {name}"), action=f"read pod {name}"
        )
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return pod
        left = deadline - time.monotonic()
        if left <= 0:
            raise InjectionFailedError(
                f"injector pod {name} still {phase or 'Pending'} after {timeout:g} s{_waiting(pod)}; it "
                "was deleted. Is the node's kubelet up, the image pullable, privileged pods admitted?"
            )
        time.sleep(min(pause, left))
        pause = min(pause * 2, _MAX_POLL_SECONDS)


def _delete_pod(api: KubeTransport, pods: str, name: str, warn: Warn) -> None:
    from nodeheal.kube.client import request_json

    try:
        response = request_json(api, "DELETE", f"{pods}/{quote(name, safe='')}", action=f"delete pod {name}")
    except NodeHealError as exc:
        warn(f"could not delete injector pod {name} ({exc}); delete it with kubectl")
        return
    if not response.ok and response.status != 404:
        warn(f"could not delete injector pod {name} (HTTP {response.status}); delete it with kubectl")


def _terminated(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        done = (status.get("state") or {}).get("terminated")
        if done:
            why = done.get("message") or done.get("reason") or ""
            return f" (exit {done.get('exitCode')}{': ' + why if why else ''})"
    return ""


def _waiting(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return f" ({waiting.get('reason', '')}: {waiting.get('message', '')})"
    return ""


# ---- dcgm ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DcgmTarget:
    """Where the node's DCGM host engine is reached: its dcgm-exporter pod and the engine address."""

    selector: str
    #: None: any namespace.
    namespace: str | None = None
    #: None: the pod's only (or default) container.
    container: str | None = None
    #: ``dcgmi --host``; "": the engine the pod's dcgmi reaches by default.
    host: str = ""


def inject_dcgm(
    api: KubeTransport,
    *,
    node: str,
    target: DcgmTarget,
    gpu: int,
    xid: int | None,
    ecc_dbe: int | None,
    timeout: float,
) -> dict[str, Any]:
    """Find the node's dcgm-exporter pod and run ``dcgmi test --inject`` in it through pods/exec
    (a WebSocket upgrade, spoken by the ``kubernetes`` client's ``stream``)."""
    from nodeheal.kube.client import expect_success, request_json

    field, value = detector.dcgm_injection(xid, ecc_dbe)
    argv = detector.dcgmi_command(gpu, field, value, target.host)
    where = (
        f"/api/v1/namespaces/{quote(target.namespace, safe='')}/pods" if target.namespace else "/api/v1/pods"
    )
    action = f"list the dcgm-exporter pods on node {node}"
    query = [("labelSelector", target.selector), ("fieldSelector", f"spec.nodeName={node}")]
    listed = expect_success(request_json(api, "GET", where, query=query, action=action), action=action)
    running = [
        pod
        for pod in listed.get("items") or []
        if (pod.get("status") or {}).get("phase") == "Running"
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    if not running:
        scope = f" in namespace {target.namespace}" if target.namespace else ""
        raise InjectionFailedError(
            f"no running pod matching {target.selector} on node {node}{scope}: is dcgm-exporter "
            "deployed there? (--dcgm-selector, --dcgm-namespace)"
        )
    pod = running[0]
    name, namespace = str(pod["metadata"]["name"]), str(pod["metadata"]["namespace"])
    with generated_client(api) as api_client:
        stdout, stderr, code = exec_in_pod(api_client, name, namespace, target.container, argv, timeout)
    if code != 0:
        said = (stderr or stdout).strip()
        raise InjectionFailedError(
            f"{' '.join(argv)} in pod {namespace}/{name} exited {code}" + (f": {said}" if said else "")
        )
    return {
        "namespace": namespace,
        "pod": name,
        "command": argv,
        "field": field.name,
        "fieldId": field.field_id,
        "value": value,
        "status": "exit 0",
        "stdout": stdout.strip(),
    }


@contextmanager
def generated_client(api: KubeTransport) -> Iterator[Any]:
    """A ``kubernetes.client.ApiClient`` for the same API server and identity as ``api``: the
    kubeconfig's own client, or one built from an ``--eks`` transport (endpoint, CA, the current
    IAM token), because a WebSocket needs the client's connection rather than NodeHeal's pool. A CA
    held as data is written to a file for the time of the exec only (the client reads CA files)."""
    existing = getattr(api, "api_client", None)
    if existing is not None:
        yield existing
        return
    from nodeheal.kube.transport import HttpTransport

    if not isinstance(api, HttpTransport):
        raise ConfigurationError("--via dcgm needs a kubeconfig or --eks to reach the cluster")
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = api.host
    configuration.verify_ssl = api.verify
    token = api.bearer_token()
    if token:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    ca_file: str | None = None
    try:
        if api.ca_cert_data:
            with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as handle:
                handle.write(api.ca_cert_data)
                ca_file = handle.name
        configuration.ssl_ca_cert = ca_file or api.ca_cert_file
        with client.ApiClient(configuration) as api_client:
            yield api_client
    finally:
        if ca_file is not None:
            Path(ca_file).unlink()


def exec_in_pod(
    api_client: Any, name: str, namespace: str, container: str | None, argv: list[str], timeout: float
) -> tuple[str, str, int]:
    """Run ``argv`` in the pod; its stdout, stderr and exit code (from the error channel's Status)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream

    options: dict[str, Any] = {"command": argv, "stdin": False, "stdout": True, "stderr": True, "tty": False}
    if container:
        options["container"] = container
    try:
        socket = stream(
            client.CoreV1Api(api_client).connect_get_namespaced_pod_exec,
            name,
            namespace,
            _preload_content=False,
            **options,
        )
    except ApiException as exc:
        # The handshake's refusal (403, 404, 400 naming the containers) is in the reason text.
        raise InjectionFailedError(f"exec in pod {namespace}/{name} was refused: {exc.reason}") from None
    try:
        socket.run_forever(timeout=timeout)
        if socket.is_open():
            raise InjectionFailedError(f"{' '.join(argv)} did not finish within {timeout:g} s")
        stdout, stderr = socket.read_channel(1), socket.read_channel(2)
        try:
            code = socket.returncode
        except (TypeError, KeyError, IndexError, ValueError):
            code = None
    finally:
        socket.close()
    if code is None:
        raise InjectionFailedError(f"exec in pod {namespace}/{name} ended without an exit status")
    return str(stdout), str(stderr), int(code)
