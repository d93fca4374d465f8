"""Defect 4 (issue 10), D17: every value that can grow is bounded before it reaches the state."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.config import PolicyOverrides, RemediationSettings
from nodeheal.errors import KubernetesApiError
from nodeheal.events import MAX_LABELS_BYTES, NodeConditionEvent, bound_labels
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.kube.pods import EvictionReport, PodOutcome, PodResult
from nodeheal.kube_views import LiveNode, PodView
from nodeheal.payload import (
    MAX_MESSAGE_BYTES,
    MAX_REASON_BYTES,
    bound_message,
    cut_text,
    fits,
    json_bytes,
    state_bytes,
)
from nodeheal.policy.classify import classify
from nodeheal.workflow.admission import PROCEED, admit
from nodeheal.workflow.mutations import MAX_POD_LINE_BYTES, drain_round
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.recording import record
from tests.unit.exporter.helpers import node, with_condition
from tests.unit.workflow.fakes import NOW, FakeLedger, FakeNodes, gpu_problem, kube, live_node, workflow_state
from tests.unit.workflow.test_ingest import detail, envelope, run

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, name=python3, GPU has fallen off the bus."
XID_154 = (
    "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) "
    "to 0x2 (Node Reboot Required)"
)
#: ~254 KB: the largest message that passed the exporter before D17 (EventBridge's 256 KB entry).
NOISE_LINES = 254_000 // 64


def noise(lines: int = NOISE_LINES) -> str:
    return "".join(
        f"kernel: nvidia-nvswitch2: link {i:05d} training retried, state ok ...\n" for i in range(lines)
    )


def classified(message: str) -> tuple[Action, int | None, str]:
    result = classify(
        Condition("GPUProblem", "True", "GPUHardwareError", message), PolicyOverrides(), Action.ALERT
    )
    return result.action, result.xid, result.signal


# -- the bounding function ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "where", ["start", "middle", "end"], ids=["xid-first", "xid-in-the-middle", "xid-last"]
)
def test_defect_4_a_huge_message_keeps_its_xid_line_whole_and_classifies_the_same(where: str) -> None:
    body = noise()
    half = len(body) // 2
    half = body.index("\n", half) + 1
    message = {
        "start": f"{XID_79}\n{body}",
        "middle": f"{body[:half]}{XID_79}\n{body[half:]}",
        "end": f"{body}{XID_79}",
    }[where]
    assert len(message.encode()) > 250_000

    cut = bound_message(message)

    assert json_bytes(cut) <= MAX_MESSAGE_BYTES
    assert XID_79 in cut.splitlines()
    assert classified(cut) == classified(XID_79) == (Action.REPLACE, 79, "xid:79")
    marker = re.fullmatch(r"…\[truncated (\d+) bytes\]", cut.splitlines()[-1])
    assert marker is not None
    assert len(message.encode()) - MAX_MESSAGE_BYTES < int(marker.group(1)) < len(message.encode())


def test_defect_4_several_xid_lines_keep_the_most_costly_decision() -> None:
    message = f"{noise(1500)}{XID_154}\n{noise(2000)}{XID_79}\n{noise(800)}"
    cut = bound_message(message)
    assert XID_154 in cut.splitlines() and XID_79 in cut.splitlines()
    assert classified(cut) == classified(f"{XID_154}\n{XID_79}")


def test_defect_4_an_xid_line_longer_than_the_bound_keeps_its_text_from_the_xid_on() -> None:
    message = "x" * 300_000 + XID_79 + " trailing" * 20_000
    cut = bound_message(message)
    assert json_bytes(cut) <= MAX_MESSAGE_BYTES
    assert cut.startswith("Xid (PCI:0000:3b:00): 79, pid=2731")
    assert classified(cut)[:2] == (Action.REPLACE, 79)


def test_defect_4_short_messages_are_untouched() -> None:
    assert bound_message(XID_79) is XID_79
    exactly = "a" * MAX_MESSAGE_BYTES
    assert bound_message(exactly) is exactly


@pytest.mark.parametrize(
    "message",
    [
        "é" * 10_000,  # 2-byte characters
        "界" * 10_000,  # 3-byte characters
        "🔥" * 10_000,  # 4-byte characters
        "a\u0001" * 10_000,  # control characters, 6 bytes each once escaped in JSON
        '"\\' * 10_000,  # quotes and backslashes, 2 bytes each once escaped
        "x" * 5000 + "\n" + "界" * 3000,
    ],
    ids=["2-byte", "3-byte", "4-byte", "control", "escaped", "mixed"],
)
def test_defect_4_cutting_never_splits_a_character_and_is_idempotent(message: str) -> None:
    cut = bound_message(message)
    assert json_bytes(cut) <= MAX_MESSAGE_BYTES
    assert len(cut.encode("utf-8")) <= MAX_MESSAGE_BYTES
    kept = cut.rsplit("…[truncated", 1)[0].rstrip("\n")
    assert message.startswith(kept)  # whole characters of the original, in order
    assert bound_message(cut) == cut
    # The size is what Step Functions sees: the message inside a JSON document.
    assert len(json.dumps({"m": cut}, ensure_ascii=False).encode()) <= MAX_MESSAGE_BYTES + 8


def test_defect_4_cut_text_bounds_other_free_text() -> None:
    reason = "GPU" * 10_000
    cut = cut_text(reason, MAX_REASON_BYTES)
    assert json_bytes(cut) <= MAX_REASON_BYTES and cut.startswith("GPUGPU") and "…[truncated" in cut
    assert cut_text(cut, MAX_REASON_BYTES) == cut
    assert cut_text("NvidiaXID79Error", MAX_REASON_BYTES) == "NvidiaXID79Error"


# -- the exporter ------------------------------------------------------------------------------


def test_defect_4_the_exporter_cuts_a_254_kb_message() -> None:
    message = f"{noise()[:120_000]}{XID_79}\n{noise()[:134_000]}"
    assert len(message.encode()) >= 254_000
    tracker = TransitionTracker(
        "training-on-eks", ExporterSettings(cluster_name="training-on-eks").watches, clock=lambda: NOW
    )
    broken = with_condition(node("ip-10-0-1-2"), "GPUProblem", "True", "GPUHardwareError" * 200, message)

    (event,) = tracker.observe(broken)

    shipped = json.loads(event.to_json())
    assert json_bytes(shipped["condition"]["message"]) <= MAX_MESSAGE_BYTES
    assert XID_79 in shipped["condition"]["message"]
    assert json_bytes(shipped["condition"]["reason"]) <= MAX_REASON_BYTES
    assert len(event.to_json().encode()) < 8 * 1024
    # The resync from memory re-sends the bounded condition, not the original.
    (again,) = tracker.resync_from_memory()
    assert again.condition == event.condition


def test_defect_4_the_exporter_ships_labels_within_their_bound_well_known_first() -> None:
    many = {f"feature.node.kubernetes.io/{'k' * 50}-{i:04d}": "v" * 63 for i in range(400)}
    obj = node("ip-10-0-1-2", extra_labels=many)
    tracker = TransitionTracker(
        "training-on-eks", ExporterSettings(cluster_name="training-on-eks").watches, clock=lambda: NOW
    )
    (event,) = tracker.observe(with_condition(obj, "GPUProblem", "True", "GPUHardwareError", XID_79))

    shipped = json.loads(event.to_json())["node"]
    assert state_bytes(shipped["labels"]) <= MAX_LABELS_BYTES
    assert shipped["labelsTrimmed"] is True
    assert shipped["labels"]["karpenter.sh/nodepool"] == "gpu"
    assert 0 < len(shipped["labels"]) < len(many)


def test_defect_4_labels_that_fit_are_shipped_unchanged() -> None:
    labels = {"karpenter.sh/nodepool": "gpu", "team": "vision"}
    assert bound_labels(labels) == (labels, False)


# -- ingest ------------------------------------------------------------------------------------


def test_defect_4_ingest_cuts_an_oversized_message_from_an_old_exporter() -> None:
    body = detail()
    body["condition"]["message"] = f"{noise()[:200_000]}{XID_79}\n{noise()[:40_000]}"
    body["node"]["labels"] = {f"example.com/{'l' * 60}-{i:04d}": "v" * 63 for i in range(300)}
    body["previous"]["reason"] = "Healthy" * 1000

    result, starter, ledger = run(envelope(body, id="e" * 5000))

    assert result["status"] == "started" and ledger.dropped == []
    started = starter.started[result["execution"]]
    condition = started["event"]["condition"]
    assert json_bytes(condition["message"]) <= MAX_MESSAGE_BYTES and XID_79 in condition["message"]
    assert state_bytes(started["event"]["node"]["labels"]) <= MAX_LABELS_BYTES
    assert started["event"]["node"]["labelsTrimmed"] is True
    assert len(started["eventId"]) == 128
    assert state_bytes(started) < 24 * 1024
    # What the workflow parses from its input is what ingest started it with: cut once, stable.
    assert NodeConditionEvent.from_detail(started["event"]).to_detail() == started["event"]


@pytest.mark.parametrize(
    ("where", "value"),
    [("condition.type", "GPUProblem" * 40), ("node.name", "n" * 400), ("cluster", "c" * 400)],
)
def test_defect_4_ingest_rejects_identity_fields_no_cluster_produces(where: str, value: str) -> None:
    body = detail()
    container, _, key = where.rpartition(".")
    (body[container] if container else body)[key] = value
    result, starter, ledger = run(envelope(body))
    assert result["status"] == "dropped" and starter.started == {}
    assert f"{where} is longer than 317 characters" in ledger.dropped[0].reason


# -- admit and record: the message is not copied again ----------------------------------------


def test_defect_4_admit_does_not_copy_the_events_message_into_the_state() -> None:
    condition = gpu_problem(message=f"{noise()[:60_000]}{XID_79}")
    live = live_node(condition=condition)
    nodes, ledger = FakeNodes({live.name: live}), FakeLedger()
    state = workflow_state(live, condition=condition)
    assert json_bytes(state.event.condition.message) <= MAX_MESSAGE_BYTES

    admission = admit(state, kube(nodes), ledger, NOW)
    stored = admission.to_json(event_message=state.event.condition.message)

    assert admission.verdict == PROCEED and admission.decision is not None and admission.decision.xid == 79
    assert "message" not in stored["condition"]
    assert stored["condition"]["reason"] == "GPUHardwareError"
    assert state_bytes(stored) < 2048

    recorded = workflow_state(live, condition=condition, extra={"admission": stored})
    record(recorded, ledger, None, NOW, region="us-west-2")
    assert ledger.records[-1].condition["message"] == state.event.condition.message


def test_defect_4_admit_keeps_a_live_message_that_changed_bounded() -> None:
    live_condition = gpu_problem(message=f"{noise()[:60_000]}{XID_154}")
    live = live_node(condition=live_condition)
    nodes, ledger = FakeNodes({live.name: live}), FakeLedger()
    state = workflow_state(live, condition=gpu_problem())

    stored = admit(state, kube(nodes), ledger, NOW).to_json(event_message=state.event.condition.message)

    assert XID_154 in stored["condition"]["message"]
    assert json_bytes(stored["condition"]["message"]) <= MAX_MESSAGE_BYTES
    recorded = workflow_state(live, condition=gpu_problem(), extra={"admission": stored})
    record(recorded, ledger, None, NOW, region="us-west-2")
    assert ledger.records[-1].condition["message"] == stored["condition"]["message"]


def test_defect_4_a_live_node_read_from_the_api_server_is_bounded() -> None:
    raw = node("gpu-a", extra_conditions=[gpu_problem(message=f"{noise()}{XID_79}")])
    live = LiveNode.from_api(raw).condition("GPUProblem")
    assert live is not None and json_bytes(live.message) <= MAX_MESSAGE_BYTES and XID_79 in live.message


# -- drain results ----------------------------------------------------------------------------


@dataclass
class BlockingPods:
    """Every pod is refused by a PodDisruptionBudget with a very long explanation."""

    pods: list[PodView] = field(default_factory=list)

    def list_on_node(self, node_name: str) -> list[PodView]:
        return self.pods

    def evict(self, pods: Any, *, parallelism: int) -> EvictionReport:
        return EvictionReport(
            tuple(
                PodResult(f"{p.namespace}/{p.name}", p.uid, PodOutcome.BLOCKED, 429, "PDB says no. " * 5000)
                for p in pods
            )
        )

    def delete(self, pods: Any, *, grace_seconds: int, parallelism: int) -> Any:
        raise AssertionError("no deletion expected")


def test_defect_4_drain_results_cap_each_pods_message() -> None:
    live = live_node(condition=gpu_problem())
    nodes, ledger = FakeNodes({live.name: live}), FakeLedger()
    pods = [
        PodView("training", f"trainer-{'x' * 200}-{i}", f"uid-{i}", "Running", ("Job",)) for i in range(30)
    ]
    state = workflow_state(live)
    admission = admit(state, kube(nodes), ledger, NOW).to_json(event_message=state.event.condition.message)
    state = workflow_state(live, extra={"admission": admission})
    nodes.taint(live.name)  # cordoned by this execution, as a drain round requires

    result = drain_round(state, KubeAccess(nodes=nodes, pods=BlockingPods(pods)), ledger, NOW, mode=Mode.FULL)

    assert result["pdbBlocked"] == 30 and len(result["lastBlocked"]) == 10
    assert all(json_bytes(line) <= MAX_POD_LINE_BYTES for line in result["lastBlocked"])
    assert (
        result["lastBlocked"][0].startswith("training/trainer-")
        and "PDB says no." in result["lastBlocked"][0]
    )
    assert state_bytes(result) < 8 * 1024


def test_defect_4_a_permanent_refusal_names_pods_with_bounded_messages() -> None:
    from nodeheal.workflow.mutations import _fail_on_permanent_errors

    failed = [PodResult(f"ns/pod-{i}", "u", PodOutcome.FAILED, 400, "denied " * 10_000) for i in range(8)]
    with pytest.raises(KubernetesApiError) as refused:
        _fail_on_permanent_errors(failed, "eviction")
    assert len(str(refused.value).encode()) < 6 * MAX_POD_LINE_BYTES
    assert "8 pod(s)" in str(refused.value)


def test_defect_4_an_explanation_lists_a_few_other_signals_not_hundreds() -> None:
    message = bound_message(" ".join(f"Xid {i}" for i in range(1000)))
    result = classify(
        Condition("GPUProblem", "True", "GPUHardwareError", message), PolicyOverrides(), Action.ALERT
    )
    assert len(result.reason) < 1024 and "more; the most costly action wins" in result.reason


def test_defect_4_settings_leave_room_in_the_state() -> None:
    # The deployed settings travel in every state; the defaults take a small share of 64 KiB.
    assert state_bytes(RemediationSettings().to_json()) < 4 * 1024


@pytest.mark.parametrize("seed", range(20))
def test_fits_agrees_with_the_exact_count_at_every_length_near_the_bound(seed: int) -> None:
    """The short-text shortcut never says a text fits that does not: control characters take six
    bytes escaped, non-ASCII up to four, quotes and backslashes two."""
    import random

    rng = random.Random(seed)
    alphabet = ["a", " ", "\n", "\x01", '"', "\\", "é", "€", "𝄞", "\ud800"]
    for length in range(0, 40):
        text = "".join(rng.choice(alphabet) for _ in range(length))
        for limit in range(0, 6 * length + 2):
            assert fits(text, limit) == (json_bytes(text) <= limit), (text, limit)
