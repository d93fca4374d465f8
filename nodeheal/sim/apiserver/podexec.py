"""``pods/exec`` over WebSocket, as kube-apiserver serves it to the ``kubernetes`` clients.

A client asks ``GET`` (or ``POST``) ``/api/v1/namespaces/{ns}/pods/{name}/exec?command=...&container=...
&stdout=true&stderr=true`` with ``Upgrade: websocket`` and the subprotocols it speaks in
``Sec-WebSocket-Protocol`` (the Python client offers ``v5.channel.k8s.io,v4.channel.k8s.io``).
Before the upgrade the API server resolves the container (``streamLocation`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/pod/strategy.go: the only
container when none is named, else 400 naming the choices; 400 for a container the pod lacks);
after it, every server message is a binary frame whose first byte is the channel: 1 stdout,
2 stderr, 3 the error channel, which carries the ``Status`` of the command's end (``Success``, or
``Failure`` with reason ``NonZeroExitCode`` and the exit code as the first cause's message;
``remotecommand`` in https://github.com/kubernetes/kubernetes/blob/v1.33.1/staging/src/k8s.io/apiserver/pkg/util/wsstream/conn.go
and https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/kubelet/cri/streaming/remotecommand/websocket.go).
The fake "runs" the command with the store's exec handler (:meth:`ClusterStore.run_exec`); none
set, the runtime answers that the executable is not found (exit 126 through the error channel
as ``Failure``/``InternalError``, as a container runtime does).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BufferedIOBase
from typing import Any

from nodeheal.sim.apiserver.status import bad_request

JSON = dict[str, Any]
#: RFC 6455's key suffix for ``Sec-WebSocket-Accept``.
_WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: The remote command subprotocols the kubelet's streaming server speaks, newest first.
SUBPROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
)
STDOUT, STDERR, ERROR = 1, 2, 3
_OPCODE_BINARY, _OPCODE_CLOSE = 0x2, 0x8


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What the command did: exit code and its output."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""


#: The fake container runtime's exec: (pod, container, argv) -> what the command did.
ExecHandler = Callable[[JSON, str, Sequence[str]], ExecResult]


def resolve_container(pod: JSON, requested: str) -> str:
    """``streamLocation``'s choice of container, or its 400."""
    name = pod["metadata"]["name"]
    names = [str(c.get("name")) for c in pod["spec"].get("containers") or []]
    if not requested:
        if len(names) == 1:
            return names[0]
        choices = " ".join(names)
        raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{choices}]")
    if requested not in names and requested not in [
        str(c.get("name")) for c in pod["spec"].get("initContainers") or []
    ]:
        raise bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def choose_subprotocol(offered: str | None) -> str:
    """The first subprotocol the client offers that the server speaks (the client lists its
    preference first); ``channel.k8s.io`` when the client names none."""
    for protocol in (p.strip() for p in (offered or "").split(",")):
        if protocol in SUBPROTOCOLS:
            return protocol
    if offered:
        raise bad_request(f"unable to upgrade: no supported subprotocol in {offered!r}")
    return "channel.k8s.io"


def accept_key(key: str) -> str:
    return base64.b64encode(
        hashlib.sha1((key + _WEBSOCKET_GUID).encode(), usedforsecurity=False).digest()
    ).decode()


def frame(payload: bytes, opcode: int = _OPCODE_BINARY) -> bytes:
    """One unmasked, final server frame (RFC 6455 section 5.2)."""
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + struct.pack("!H", size)
    else:
        head += bytes([127]) + struct.pack("!Q", size)
    return head + payload


def end_status(result: ExecResult, argv: Sequence[str]) -> JSON:
    """The error channel's ``Status`` at the command's end."""
    if result.exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            f"command terminated with non-zero exit code: error executing command [{' '.join(argv)}], "
            f"exit code {result.exit_code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(result.exit_code)}]},
    }


def stream(
    out: BufferedIOBase, result: ExecResult, argv: Sequence[str], *, stdout: bool, stderr: bool
) -> None:
    """After the 101: the output on its channels, the end status, then a close frame."""
    if stdout and result.stdout:
        out.write(frame(bytes([STDOUT]) + result.stdout.encode()))
    if stderr and result.stderr:
        out.write(frame(bytes([STDERR]) + result.stderr.encode()))
    status = json.dumps(end_status(result, argv), separators=(",", ":")).encode()
    out.write(frame(bytes([ERROR]) + status))
    out.write(frame(struct.pack("!H", 1000), _OPCODE_CLOSE))
    out.flush()


def not_found_result(argv: Sequence[str]) -> ExecResult:
    """What a runtime answers for an executable the image does not have."""
    first = argv[0] if argv else ""
    return ExecResult(
        126,
        stderr=f'OCI runtime exec failed: exec failed: unable to start container process: exec: "{first}": '
        "executable file not found in $PATH: unknown\r\n",
    )
