"""Every node-problem-detector install command in the docs pins a chart version that runs our GPU check.

Facts from the chart's source (deliveryhero/helm-charts, stable/node-problem-detector), recorded here
because there is no helm on this machine to render it:

* ``templates/daemonset.yaml`` mounts the custom-config volume with ``defaultMode: 493`` (0755)
  since chart 2.3.3 (deliveryhero/helm-charts#442). NPD exec()s the custom plugin's script itself,
  so with an older chart ``check_gpu.sh`` (0644) never runs.
* ``Chart.yaml`` appVersion per chart version: the NPD image the chart was released with.
* The charts are published as OCI artifacts at ``oci://ghcr.io/deliveryhero/helm-charts`` since
  deliveryhero/helm-charts#612.
* Chart 2.4.1 (commit a0b62790c2bdcdb6a17cb2dae159e1901df0ef0f), ``templates/*.yaml``: the values
  it reads (:data:`CHART_VALUES`); ``daemonset.yaml`` sets the pod's ``hostNetwork``, ``hostPID``
  and ``dnsPolicy`` from the values of those names, appends ``extraVolumes`` and
  ``extraVolumeMounts`` to its own (``log`` at ``/var/log/``, ``custom-config``), and its
  ``values.yaml`` defaults ``securityContext`` to ``privileged: true``, which gives the container
  the host's devices (``/dev/kmsg``, ``/dev/nvidia*``) and every capability (``NET_RAW`` for ping).
* The NPD v1.35.1 image (kubernetes/node-problem-detector, tag v1.35.1, ``Dockerfile``:
  ``registry.k8s.io/build-image/debian-base:bookworm-v1.0.6`` plus ``clean-install util-linux bash
  libsystemd-dev``; debian-base is Debian bookworm-slim minus a few packages, kubernetes/release
  ``images/build/debian-base/bookworm/Dockerfile.build``) has ``timeout``, ``test`` and ``date``
  (coreutils), ``getent`` (libc-bin) and ``nsenter`` (util-linux), but no ``ping``, ``ctr``,
  ``curl`` or ``nvidia-smi``. The plugins run the node's ``ping``, ``ctr`` and ``curl`` through
  ``HOST_EXEC`` (``nsenter`` into PID 1's mount namespace, which needs ``hostPID`` and the
  privileged ``securityContext``); ``nvidia-smi`` is injected by the NVIDIA container runtime,
  containerd's default runtime on the EKS accelerated AL2023 AMIs (awslabs/amazon-eks-ami,
  ``nodeadm/internal/containerd/runtime_config_nvidia.go``).
* Chart 2.4.1 mounts its own volumes read-only (``log``, ``localtime``, ``custom-config``) and
  sets no ``readOnlyRootFilesystem``: the container's own filesystem is writable, and a hostPath
  from ``extraVolumes`` keeps ``check_gateway.sh``'s record of this boot across container restarts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "deploy" / "node-problem-detector" / "values.yaml"
GATEWAY = (ROOT / "deploy" / "node-problem-detector" / "check_gateway.sh").read_text()
DOCS = [
    ROOT / "README.md",
    ROOT / "deploy" / "exporter" / "README.md",
    VALUES,
    *sorted((ROOT / "docs").glob("*.md")),
]
OCI_CHART = "oci://ghcr.io/deliveryhero/helm-charts/node-problem-detector"
EXECUTABLE_CONFIG_SINCE = Version("2.3.3")
#: Chart.yaml appVersion of the chart versions that ship NPD v1.35.1 (git log of Chart.yaml).
APP_VERSION = {"2.4.0": "v1.35.1", "2.4.1": "v1.35.1"}


def helm_commands(path: Path) -> list[str]:
    """``helm install``/``upgrade`` commands naming node-problem-detector, continuation lines joined
    (in YAML files the commands sit in comments)."""
    lines = path.read_text().splitlines()
    if path.suffix == ".yaml":
        lines = [line.lstrip().removeprefix("#") for line in lines if line.lstrip().startswith("#")]
    commands, current = [], ""
    for line in lines:
        current += " " + line.split(" #", 1)[0].strip()
        if current.rstrip().endswith("\\"):
            current = current.rstrip()[:-1]
            continue
        if re.search(r"\bhelm (upgrade|install)\b", current) and "node-problem-detector" in current:
            commands.append(" ".join(current.split()))
        current = ""
    return commands


def pinned_version(command: str) -> str:
    match = re.search(r"--version[ =](\S+)", command)
    assert match, f"no --version in: {command}"
    return match.group(1)


def test_every_install_command_pins_one_oci_chart_version_that_mounts_the_check_executable() -> None:
    commands = {path.relative_to(ROOT).as_posix(): helm_commands(path) for path in DOCS}
    assert commands["README.md"], "the README shows how to install node-problem-detector"
    assert commands["deploy/node-problem-detector/values.yaml"]
    versions = set()
    for where, found in commands.items():
        for command in found:
            assert f" {OCI_CHART} " in f" {command} ", f"{where}: not the OCI chart: {command}"
            assert "-f deploy/node-problem-detector/values.yaml" in command, where
            versions.add(pinned_version(command))
    (version,) = versions  # one pin everywhere
    assert Version(version) >= EXECUTABLE_CONFIG_SINCE


def test_the_pinned_chart_ships_the_image_the_values_name() -> None:
    (version,) = {pinned_version(c) for c in helm_commands(ROOT / "README.md")}
    values = yaml.safe_load(VALUES.read_text())
    assert values["image"]["tag"] == APP_VERSION[version]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_doc_points_at_the_retired_chart_repository(path: Path) -> None:
    assert "helm repo add deliveryhero https://charts.deliveryhero.io" not in path.read_text()


def test_the_command_reader_finds_unpinned_and_non_oci_commands(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```\nhelm upgrade --install npd deliveryhero/node-problem-detector -n kube-system \\\n"
        "  -f deploy/node-problem-detector/values.yaml   # comment\n```\n"
    )
    (command,) = helm_commands(doc)
    assert OCI_CHART not in command
    with pytest.raises(AssertionError, match="no --version"):
        pinned_version(command)


#: Top-level values chart 2.4.1's templates read (``git grep -o '.Values.[A-Za-z_]*' templates``).
CHART_VALUES = frozenset(
    [
        "affinity",
        "annotations",
        "dnsConfig",
        "dnsPolicy",
        "env",
        "extraContainers",
        "extraVolumeMounts",
        "extraVolumes",
        "fullnameOverride",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "image",
        "imagePullSecrets",
        "initContainers",
        "labels",
        "logDir",
        "maxUnavailable",
        "metrics",
        "nameOverride",
        "nodeSelector",
        "priorityClassName",
        "rbac",
        "resizePolicy",
        "resources",
        "securityContext",
        "serviceAccount",
        "settings",
        "tolerations",
        "updateStrategy",
        "volume",
    ]
)


def test_every_value_we_set_is_one_the_pinned_chart_reads() -> None:
    (version,) = {pinned_version(c) for c in helm_commands(ROOT / "README.md")}
    assert version == "2.4.1", "CHART_VALUES was read from chart 2.4.1: read it again for the new pin"
    values = yaml.safe_load(VALUES.read_text())
    assert set(values) <= CHART_VALUES, set(values) - CHART_VALUES


def test_the_daemonset_gets_what_the_detectors_need() -> None:
    values = yaml.safe_load(VALUES.read_text())
    # ping and the node's resolver (check_gateway.sh, check_dns.sh).
    assert values["hostNetwork"] is True and values["dnsPolicy"] == "Default"
    # The host's processes in /proc (check_gpu_zombies.sh), and its init as PID 1 (HOST_EXEC).
    assert values["hostPID"] is True
    # Devices, NET_RAW and entering PID 1's mount namespace: the chart's default privileged
    # securityContext, not overridden away.
    assert "securityContext" not in values or values["securityContext"].get("privileged") is True
    mounts = {m["name"]: m["mountPath"] for m in values["extraVolumeMounts"]}
    volumes = {v["name"]: v["hostPath"] for v in values["extraVolumes"]}
    assert set(mounts) == set(volumes)
    env = {e["name"]: e["value"] for e in values["env"]}
    assert env["DNS_CHECK_NAME"] and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    # The node's ping, ctr and curl (the image has none) run in the node's mount namespace, where
    # containerd's and Docker's sockets are too: nsenter into PID 1, the node's init with hostPID.
    # No hostPath of a binary or a socket, which would keep the pod from starting where it is absent.
    assert env["HOST_EXEC"].split() == ["nsenter", "--target", "1", "--mount", "--"]
    for volume in volumes.values():
        assert volume["type"] in ("Directory", "DirectoryOrCreate"), volume
    # check_gateway.sh's record of the gateway's answer on this boot, on the node.
    state = env["GATEWAY_STATE_FILE"]
    directory = state.rsplit("/", 1)[0]
    assert mounts["gateway-state"] == directory
    assert volumes["gateway-state"] == {"path": directory, "type": "DirectoryOrCreate"}
    assert re.search(rf'^GATEWAY_STATE_FILE="\$\{{GATEWAY_STATE_FILE:-{re.escape(state)}\}}"$', GATEWAY, re.M)
