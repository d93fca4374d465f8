"""The shipped NPD GPU rules, audited against NPD's own condition semantics and NodeHeal's policy.

node-problem-detector's log monitor (``pkg/systemlogmonitor/log_monitor.go``, ``parseLog`` and
``generateStatus``) tries every rule against each new kernel line, in file order. A temporary rule
only posts an Event. A permanent rule sets its condition True, and it changes the condition's
message and transition time only when the condition was False *or its reason differs from the
rule's*; with the same reason, the message of the first fault stays. The exporter publishes on a
change of (status, reason) only. So two faults that need different NodeHeal actions must land on
different reasons, or the second one never reaches NodeHeal. These tests replay every ordered pair
of catalog faults through that logic and decide each condition with the shipped policy (cdk.json).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.deploy_config import load_cdk_json
from nodeheal.policy.catalog import lookup
from nodeheal.policy.classify import classify
from nodeheal.sim import detectors

ROOT = Path(__file__).resolve().parents[2]
GPU_MONITOR = ROOT / "deploy" / "node-problem-detector" / "gpu-monitor.json"
CATALOG = ROOT / "nodeheal" / "policy" / "xid_catalog.csv"
PCI = "PCI:0000:3b:00"


@dataclass(frozen=True, slots=True)
class NpdCondition:
    """The log monitor's view of one condition (``types.Condition``)."""

    status: str
    reason: str
    message: str


def rules() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(GPU_MONITOR.read_text())["rules"]
    return loaded


def initial() -> NpdCondition:
    default = json.loads(GPU_MONITOR.read_text())["conditions"][0]
    return NpdCondition("False", default["reason"], default["message"])


def after_line(condition: NpdCondition, line: str) -> NpdCondition:
    """``parseLog`` for one line: each matching rule in order; ``generateStatus`` for permanent ones.
    NPD compiles each pattern with ``\\z`` appended and matches it against the buffered log."""
    for rule in rules():
        match = re.search(f"(?:{rule['pattern']})\\Z", line)
        if match is None or rule["type"] != "permanent":
            continue
        if condition.status == "False" or condition.reason != rule["reason"]:
            condition = NpdCondition("True", rule["reason"], match.group(0))
        else:
            condition = replace(condition, status="True")
    return condition


def catalog_xids() -> list[int]:
    return [int(row.split(",", 1)[0]) for row in CATALOG.read_text().splitlines()[1:] if row.strip()]


def xid_line(xid: int, detail: str) -> str:
    return f"NVRM: Xid ({PCI}): {xid}, pid='<unknown>', name=<unknown>, {detail}"


def catalog_faults() -> dict[str, str]:
    """Every catalog Xid as the driver logs it, once per text the policy decodes differently
    (94/95 RST flag, NVLink5 severity, each Xid 154 recovery action), plus the GPU faults the
    driver and the kernel log without an Xid (fallen off the bus, the driver failing to load)."""
    faults: dict[str, str] = {}
    for xid in catalog_xids():
        entry = lookup(xid)
        assert entry is not None
        if xid in (94, 95):
            for flag in ("Yes", "No"):
                faults[f"xid{xid}-rst-{flag.lower()}"] = xid_line(
                    xid, f"Contained: CE User Channel (0x9). RST: {flag}, D-RST: No"
                )
        elif 144 <= xid <= 150:
            for severity in ("Fatal", "Nonfatal"):
                faults[f"xid{xid}-{severity.lower()}"] = xid_line(
                    xid, f"NETIR_LINK_EVT {severity} XC0 i0 Link 01 (0x021425c6 0x0 0x0 0x0 0x0 0x0)"
                )
        elif xid == 154:
            for code, label in enumerate(
                ("None", "GPU Reset Required", "Node Reboot Required", "Drain P2P", "Drain and Reset")
            ):
                faults[f"xid154-to-{code}"] = (
                    f"NVRM: Xid ({PCI}): 154, GPU recovery action changed from 0x0 (None) to 0x{code:x} ({label})"
                )
        elif xid == 79:
            faults["xid79"] = xid_line(79, "GPU has fallen off the bus.")
        else:
            faults[f"xid{xid}"] = xid_line(xid, entry.name)
    faults["fallen-off-the-bus"] = (
        "NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has fallen off "
        "the bus and is not responding to commands."
    )
    faults["rminitadapter-failed"] = "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x55:2477)"
    # The driver failed to load (tests/unit/fixtures/nvidia_kernel_log.txt has more forms).
    faults["rm-init-adapter-minor"] = "NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0"
    faults["api-mismatch"] = "NVRM: API mismatch: the client has the version 550.127.05, but"
    faults["probe-routine-failed"] = "NVRM: The NVIDIA probe routine failed for 1 device(s)."
    faults["module-unknown-symbol"] = "nvidia: Unknown symbol drm_gem_object_free (err -2)"
    faults["module-version-magic"] = (
        "nvidia: version magic '6.1.112 SMP mod_unload ' should be '6.1.115 SMP mod_unload '"
    )
    return faults


FAULTS = catalog_faults()


@pytest.fixture(scope="module")
def policy() -> PolicySettings:
    return load_cdk_json(str(ROOT / "cdk.json")).remediation.policy


def verdict(condition: NpdCondition, policy: PolicySettings) -> tuple[Action, int]:
    """What NodeHeal's shipped policy does with GPUProblem in this state: action and confirmation."""
    decided = classify(
        Condition("GPUProblem", condition.status, condition.reason, condition.message),
        policy.overrides,
        policy.unknown_action,
    )
    return decided.action, decided.confirm_seconds


def test_every_pair_of_faults_reaches_nodeheal_with_its_own_verdict(policy: PolicySettings) -> None:
    healthy = initial()
    collisions = []
    for (first, first_line), (second, second_line) in itertools.permutations(FAULTS.items(), 2):
        alone = after_line(healthy, second_line)
        if alone.status != "True":
            continue  # the second fault sets no condition (an Event at most): nothing to overwrite
        after_both = after_line(after_line(healthy, first_line), second_line)
        if verdict(after_both, policy) != verdict(alone, policy):
            collisions.append(
                f"{first} then {second}: both set reason {after_both.reason}, so NPD keeps the first "
                f"message ({verdict(after_both, policy)[0].value}) and {second} "
                f"({verdict(alone, policy)[0].value}) never reaches NodeHeal"
            )
    assert collisions == []


def test_one_reason_one_verdict(policy: PolicySettings) -> None:
    """The same audit per reason, which names the rule to split when it fails."""
    by_reason: dict[str, set[tuple[Action, int]]] = {}
    for line in FAULTS.values():
        state = after_line(initial(), line)
        if state.status == "True":
            by_reason.setdefault(state.reason, set()).add(verdict(state, policy))
    assert {reason: verdicts for reason, verdicts in by_reason.items() if len(verdicts) > 1} == {}
    assert len(by_reason) >= 10, by_reason  # the audit saw the shipped rules, not an empty file


def test_every_fault_the_policy_acts_on_sets_the_condition(policy: PolicySettings) -> None:
    """NPD's temporary rules post Events, which NodeHeal ships as context but never acts on: a fault
    whose verdict is an action must therefore match a permanent rule."""
    missed = {}
    for name, line in FAULTS.items():
        state = after_line(initial(), line)
        if state.status == "True":
            continue
        as_condition = NpdCondition("True", "GPUProblem", line)
        action, _ = verdict(as_condition, policy)
        if action is not Action.NONE:
            missed[name] = action.value
    assert missed == {}


def test_faults_the_policy_ignores_set_no_condition(policy: PolicySettings) -> None:
    """A permanent condition never returns to False in NPD's log monitor (only a restart resets it),
    so a fault NodeHeal ignores must stay an Event rather than mark the node bad for good."""
    needless = {
        name: state.reason
        for name, line in FAULTS.items()
        if (state := after_line(initial(), line)).status == "True"
        and verdict(state, policy)[0] is Action.NONE
    }
    assert needless == {}


# --- The custom plugin monitors ---------------------------------------------------------------
#
# A custom plugin rule has one reason, and the plugin's first stdout line is the message
# (pkg/custompluginmonitor/custom_plugin_monitor.go, generateStatus, modelled by
# nodeheal.sim.detectors.npd_custom_plugin). NodeHeal's plugin monitors leave the message-change
# update off, so a second fault under the same reason keeps the first message: every output a
# plugin prints for a fault must decide the same way.

NPD_DIR = ROOT / "deploy" / "node-problem-detector"

#: What each shipped plugin prints for each fault it reports (tests/unit/test_npd_plugins.py runs
#: the plugins to these outputs).
PLUGIN_FAULTS: dict[str, list[str]] = {
    "gpu-plugin-monitor.json": [
        "nvidia-smi timed out: no answer within 30s",
        "nvidia-smi error (15): Unable to determine the device handle for GPU0000:3B:00.0: Unknown",
        "nvidia-smi error (9): NVIDIA-SMI has failed because it couldn't communicate with the NVID",
        "GPU count mismatch: nvidia-smi lists 7, node advertises 8",
    ],
    "gpu-zombie-monitor.json": [
        "1 stuck process(es) hold /dev/nvidia*: 9001 pt_main_thread (D)",
        "1 stuck process(es) hold /dev/nvidia*: 9002 python3 (Z)",
    ],
    "gpu-thermal-monitor.json": [
        "1 GPU(s) throttled or hot; GPU 3: hw-thermal 91C",
        "8 GPU(s) throttled or hot; GPU 0: power-brake",
    ],
    "gateway-monitor.json": ["gateway 172.31.64.1 unreachable: no reply to 3 pings, answered this boot"],
    "dns-monitor.json": [
        "DNS: sts.amazonaws.com does not resolve",
        "DNS: no answer for sts.amazonaws.com within 10s",
    ],
    "runtime-monitor.json": [
        "containerd answered in 3412 ms (bound 2000 ms)",
        "containerd did not answer within 15s",
        'containerd not answering (1): ctr: failed to dial "/run/containerd/containerd.sock": connecti',
        "docker answered in 2950 ms (bound 2000 ms)",
        "docker did not answer within 15s",
        "docker not answering (7): curl: (7) Failed to connect to localhost port 80 after 0 ms: Couldn",
        "docker answered /_ping with HTTP 500",
    ],
}


def plugin_monitors() -> list[str]:
    return sorted(
        p.name for p in NPD_DIR.glob("*.json") if json.loads(p.read_text()).get("plugin") == "custom"
    )


def test_every_plugin_monitor_has_recorded_faults() -> None:
    assert sorted(PLUGIN_FAULTS) == plugin_monitors()


def plugin_verdict(condition: dict[str, Any], policy: PolicySettings) -> tuple[Action, int]:
    decided = classify(
        Condition(condition["type"], condition["status"], condition["reason"], condition["message"]),
        policy.overrides,
        policy.unknown_action,
    )
    return decided.action, decided.confirm_seconds


@pytest.mark.parametrize("name", sorted(PLUGIN_FAULTS))
def test_every_pair_of_plugin_faults_reaches_nodeheal_with_its_own_verdict(
    name: str, policy: PolicySettings
) -> None:
    config = json.loads((NPD_DIR / name).read_text())
    (default,) = config["conditions"]
    updates = config["pluginConfig"]["enable_message_change_based_condition_update"]
    faults = [(rule, output) for rule in config["rules"] for output in PLUGIN_FAULTS[name]]
    # Each rule's reason is known to the owner table the simulation and `inject` write through.
    assert detectors.CONDITIONS[default["type"]].reason == default["reason"]

    def run(current: dict[str, Any] | None, rule: dict[str, Any], output: str) -> dict[str, Any]:
        return detectors.npd_custom_plugin(
            current,
            rule["condition"],
            "True",
            rule["reason"],
            output,
            "2026-01-01T00:00:00Z",
            default_reason=default["reason"],
            default_message=default["message"],
            message_change_updates=updates,
        )

    collisions = []
    for (rule_a, first), (rule_b, second) in itertools.permutations(faults, 2):
        alone = run(None, rule_b, second)
        after_both = run(run(None, rule_a, first), rule_b, second)
        assert alone["status"] == "True"
        if plugin_verdict(after_both, policy) != plugin_verdict(alone, policy):
            collisions.append(f"{first!r} then {second!r} under {after_both['reason']}")
        # A fault the policy would ignore must not be reported as a fault at all.
        assert plugin_verdict(alone, policy)[0] is not Action.NONE, second
    assert collisions == []


# --- NodeHeal's node log monitor (CPU, memory, disk, filesystem) --------------------------------

NODE_MONITOR = NPD_DIR / "node-monitor.json"
NODE_FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "node_kernel_log.txt"


def node_faults() -> list[str]:
    return [
        raw.split("|", 1)[1].strip()
        for raw in NODE_FIXTURES.read_text().splitlines()
        if raw.strip() and not raw.startswith("#") and not raw.startswith("-")
    ]


def after_node_line(conditions: dict[str, NpdCondition], line: str) -> dict[str, NpdCondition]:
    """``parseLog``/``generateStatus`` for one line, over every condition of the monitor."""
    config = json.loads(NODE_MONITOR.read_text())
    conditions = dict(conditions)
    for rule in config["rules"]:
        match = re.search(f"(?:{rule['pattern']})\\Z", line)
        if match is None or rule["type"] != "permanent":
            continue
        current = conditions[rule["condition"]]
        if current.status == "False" or current.reason != rule["reason"]:
            conditions[rule["condition"]] = NpdCondition("True", rule["reason"], match.group(0))
        else:
            conditions[rule["condition"]] = replace(current, status="True")
    return conditions


def node_initial() -> dict[str, NpdCondition]:
    config = json.loads(NODE_MONITOR.read_text())
    return {c["type"]: NpdCondition("False", c["reason"], c["message"]) for c in config["conditions"]}


def node_verdicts(
    conditions: dict[str, NpdCondition], policy: PolicySettings
) -> dict[str, tuple[Action, int]]:
    verdicts = {}
    for condition_type, state in conditions.items():
        decided = classify(
            Condition(condition_type, state.status, state.reason, state.message),
            policy.overrides,
            policy.unknown_action,
        )
        verdicts[condition_type] = (decided.action, decided.confirm_seconds)
    return verdicts


def test_every_pair_of_node_faults_reaches_nodeheal_with_its_own_verdict(policy: PolicySettings) -> None:
    faults = node_faults()
    assert len(faults) >= 10
    collisions = []
    for first, second in itertools.permutations(faults, 2):
        alone = after_node_line(node_initial(), second)
        both = after_node_line(after_node_line(node_initial(), first), second)
        for condition_type, state in alone.items():
            if state.status != "True":
                continue
            if node_verdicts(both, policy)[condition_type] != node_verdicts(alone, policy)[condition_type]:
                collisions.append(f"{first!r} then {second!r} on {condition_type}")
    assert collisions == []


def test_every_node_fault_sets_a_condition_nodeheal_acts_on(policy: PolicySettings) -> None:
    for line in node_faults():
        alone = after_node_line(node_initial(), line)
        bad = {t: s for t, s in alone.items() if s.status == "True"}
        if not bad:
            continue  # a temporary rule: an Event only
        ((condition_type, _),) = bad.items()
        action, _ = node_verdicts(alone, policy)[condition_type]
        assert action is not Action.NONE, line
        assert detectors.CONDITIONS[condition_type].detector is detectors.Detector.NPD_LOG_MONITOR
