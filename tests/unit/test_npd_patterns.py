"""The node-problem-detector GPU config: patterns against real-shaped NVIDIA kernel log lines,
the custom plugin script against a fake nvidia-smi, and the Helm values against the files."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NPD = ROOT / "deploy" / "node-problem-detector"
FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_kernel_log.txt"
#: Constructs Go's RE2 (which NPD uses) rejects but Python accepts; the patterns must avoid them.
_NOT_RE2 = re.compile(r"\(\?[=!<]|\\[1-9]|\(\?P=|\*\+|\+\+|\?\+")


def monitor(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((NPD / name).read_text())
    return loaded


def fixtures() -> list[tuple[str, str]]:
    cases = []
    for raw in FIXTURES.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        expected, line = (part.strip() for part in raw.split("|", 1))
        cases.append((expected, line))
    return cases


def classify(line: str) -> str:
    """What NPD would do with ``line``: NPD anchors each rule at the end of the log (``pattern\\z``);
    the first matching permanent rule sets the condition, temporary rules post an Event."""
    for rule in monitor("gpu-monitor.json")["rules"]:
        if re.search(f"(?:{rule['pattern']})\\Z", line):
            return rule["reason"] if rule["type"] == "permanent" else f"event:{rule['reason']}"
    return "-"


@pytest.mark.parametrize(("expected", "line"), fixtures(), ids=lambda value: value[:60])
def test_kernel_log_line_is_classified(expected: str, line: str) -> None:
    assert classify(line) == expected


def test_every_rule_is_exercised_by_a_fixture_and_is_re2_compatible() -> None:
    config = monitor("gpu-monitor.json")
    reasons = {expected for expected, _ in fixtures()}
    for rule in config["rules"]:
        key = rule["reason"] if rule["type"] == "permanent" else f"event:{rule['reason']}"
        assert key in reasons, f"no fixture line for rule {rule['reason']}"
        assert not _NOT_RE2.search(rule["pattern"]), rule["pattern"]
        re.compile(rule["pattern"])
        if rule["type"] == "permanent":
            assert rule["condition"] == "GPUProblem"
    assert config["conditions"] == [
        {
            "type": "GPUProblem",
            "reason": "GPUHealthy",
            "message": "no NVIDIA GPU fault seen in the kernel log",
        }
    ]


def test_xid_code_is_kept_in_the_condition_message() -> None:
    # NPD uses the matched log text as the condition message, so the code survives for the policy.
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, name=python3, GPU has fallen off the bus."
    rule = next(r for r in monitor("gpu-monitor.json")["rules"] if r["reason"] == "GPUFellOffBus")
    match = re.search(f"(?:{rule['pattern']})\\Z", line)
    assert match is not None and "Xid (PCI:0000:3b:00): 79," in match.group(0)


def test_helm_values_embed_the_files_verbatim() -> None:
    values = yaml.safe_load((NPD / "values.yaml").read_text())
    definitions = values["settings"]["custom_monitor_definitions"]
    shipped = sorted(p.name for p in NPD.iterdir() if p.suffix in (".json", ".sh"))
    assert sorted(definitions) == shipped
    for name in shipped:
        assert definitions[name].rstrip("\n") == (NPD / name).read_text().rstrip("\n"), name
    # Each monitor is enabled under the list its plugin type belongs to; each plugin script is run.
    custom = [
        f"/custom-config/{n}" for n in shipped if n.endswith(".json") and monitor(n)["plugin"] == "custom"
    ]
    logs = [
        f"/custom-config/{n}" for n in shipped if n.endswith(".json") and monitor(n)["plugin"] != "custom"
    ]
    assert sorted(values["settings"]["custom_plugin_monitors"]) == sorted(custom)
    assert set(logs) <= set(values["settings"]["log_monitors"])
    paths = {rule["path"] for path in custom for rule in monitor(path.rsplit("/", 1)[1])["rules"]}
    assert paths == {f"/custom-config/{n}" for n in shipped if n.endswith(".sh")}
    assert monitor("gpu-plugin-monitor.json")["rules"][0]["path"] == "/custom-config/check_gpu.sh"


def fake_smi(tmp_path: Path, script: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script)
    smi.chmod(0o755)
    return bin_dir


def run_check(tmp_path: Path, smi_script: str, **env: str) -> tuple[int, str]:
    bin_dir = fake_smi(tmp_path, smi_script)
    environment = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SYSFS_PCI": str(tmp_path / "no-sysfs"),
        **env,
    }
    result = subprocess.run(
        ["/bin/sh", str(NPD / "check_gpu.sh")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.returncode, result.stdout.strip()


EIGHT_GPUS = "".join(
    f"echo 00000000:{bus}:00.0\n" for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
)


def test_plugin_ok_when_count_matches(tmp_path: Path) -> None:
    code, out = run_check(tmp_path, EIGHT_GPUS, EXPECTED_GPU_COUNT="8")
    assert (code, out) == (0, "nvidia-smi OK, 8 of 8 GPU(s) present")


def test_plugin_problem_when_a_gpu_is_missing(tmp_path: Path) -> None:
    seven = "\n".join(EIGHT_GPUS.splitlines()[:7]) + "\n"
    code, out = run_check(tmp_path, seven, EXPECTED_GPU_COUNT="8")
    assert (code, out) == (1, "GPU count mismatch: nvidia-smi lists 7, node advertises 8")


def test_plugin_problem_when_nvidia_smi_fails_or_hangs(tmp_path: Path) -> None:
    code, out = run_check(
        tmp_path, "echo 'Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error'\nexit 15\n"
    )
    assert code == 1 and out.startswith("nvidia-smi error (15): Unable to determine the device handle")
    code, out = run_check(tmp_path, "sleep 5\n", SMI_TIMEOUT="1")
    assert (code, out) == (1, "nvidia-smi timed out: no answer within 1s")


def test_plugin_reads_expected_count_from_the_pci_bus(tmp_path: Path) -> None:
    sysfs = tmp_path / "sysfs"
    for index, (vendor, device_class) in enumerate(
        [("0x10de", "0x030200")] * 2 + [("0x10de", "0x068000"), ("0x8086", "0x030000")]
    ):
        device = sysfs / f"0000:{index:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(device_class + "\n")
    one_gpu = "echo 00000000:00:00.0\n"
    code, out = run_check(tmp_path, one_gpu, SYSFS_PCI=str(sysfs))
    assert (code, out) == (1, "GPU count mismatch: nvidia-smi lists 1, node advertises 2")


def test_plugin_unknown_without_nvidia_smi(tmp_path: Path) -> None:
    result = subprocess.run(
        ["/bin/sh", str(NPD / "check_gpu.sh")],
        env={"PATH": str(tmp_path), "NVIDIA_SMI": "nvidia-smi-missing"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2


NODE_FIXTURES = Path(__file__).parent / "fixtures" / "node_kernel_log.txt"


def node_fixtures() -> list[tuple[str, str]]:
    cases = []
    for raw in NODE_FIXTURES.read_text().splitlines():
        if raw.strip() and not raw.startswith("#"):
            expected, line = (part.strip() for part in raw.split("|", 1))
            cases.append((expected, line))
    return cases


def classify_node_line(line: str) -> str:
    for rule in monitor("node-monitor.json")["rules"]:
        if re.search(f"(?:{rule['pattern']})\\Z", line):
            return rule["reason"] if rule["type"] == "permanent" else f"event:{rule['reason']}"
    return "-"


@pytest.mark.parametrize(("expected", "line"), node_fixtures(), ids=lambda value: value[:60])
def test_node_kernel_log_line_is_classified(expected: str, line: str) -> None:
    assert classify_node_line(line) == expected


def test_every_node_rule_is_exercised_and_re2_compatible_and_its_condition_declared() -> None:
    config = monitor("node-monitor.json")
    reasons = {expected for expected, _ in node_fixtures()}
    declared = {condition["type"] for condition in config["conditions"]}
    for rule in config["rules"]:
        key = rule["reason"] if rule["type"] == "permanent" else f"event:{rule['reason']}"
        assert key in reasons, f"no fixture line for rule {rule['reason']}"
        assert not _NOT_RE2.search(rule["pattern"]), rule["pattern"]
        if rule["type"] == "permanent":
            assert rule["condition"] in declared
    # NPD's stock monitors keep their own conditions; NodeHeal's monitor never writes one of them.
    assert declared.isdisjoint(
        {"KernelDeadlock", "ReadonlyFilesystem", "XfsShutdown", "CperHardwareErrorFatal"}
    )
