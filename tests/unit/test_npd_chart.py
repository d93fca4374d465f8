"""Every node-problem-detector install command in the docs pins a chart version that runs our GPU check.

Facts from the chart's source (deliveryhero/helm-charts, stable/node-problem-detector), recorded here
because there is no helm on this machine to render it:

* ``templates/daemonset.yaml`` mounts the custom-config volume with ``defaultMode: 493`` (0755)
  since chart 2.3.3 (deliveryhero/helm-charts#442). NPD exec()s the custom plugin's script itself,
  so with an older chart ``check_gpu.sh`` (0644) never runs.
* ``Chart.yaml`` appVersion per chart version: the NPD image the chart was released with.
* The charts are published as OCI artifacts at ``oci://ghcr.io/deliveryhero/helm-charts`` since
  deliveryhero/helm-charts#612.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "deploy" / "node-problem-detector" / "values.yaml"
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
