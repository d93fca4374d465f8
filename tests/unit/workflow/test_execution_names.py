"""Execution names (docs/architecture.md, D3): what people search the console for stays in them.

A name is ``<cluster>-<node>-<condition>-<transition time>-<hash>`` (plus ``-r<N>`` for a person's
re-evaluation) in at most 80 characters of ``[A-Za-z0-9_-]``. When it would not fit, the time and
the condition give way first, then the node, and the cluster only past its cap: people filter the
console by ``<cluster>-<node>``, and the hash alone keeps two transitions apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodeheal.events import NodeConditionEvent
from nodeheal.workflow.ingest import (
    CLUSTER_NAME_CHARS,
    MAX_EXECUTION_NAME,
    NODE_NAME_CHARS,
    execution_name,
    reevaluation_name,
)

LEGAL = re.compile(r"[A-Za-z0-9_-]{1,80}")
#: The node monitoring agent's Xid 79 on the shipped cluster (cdk.json's training-on-eks).
AGENT_XID_79 = {
    "type": "AcceleratedHardwareReady",
    "status": "False",
    "reason": "NvidiaXID79Error",
    "message": "detected XID-79 on the instance, review kernel logs for additional information.",
    "lastTransitionTime": "2026-11-21T10:00:00Z",
}


def event(
    *,
    cluster: str = "training-on-eks",
    node: str = "ip-10-0-158-235.us-west-2.compute.internal",
    uid: str = "4c1b6a0e-1f0e-4c55-9f2b-0b9f1f7c2a11",
    condition: dict[str, Any] | None = None,
) -> NodeConditionEvent:
    return NodeConditionEvent.from_detail(
        {
            "schemaVersion": "1.1",
            "cluster": cluster,
            "node": {"name": node, "uid": uid, "providerID": "aws:///us-west-2b/i-0abc1234def567890"},
            "condition": condition or AGENT_XID_79,
            "observedAt": "2026-11-21T10:00:01.234Z",
        }
    )


def digest_of(name: str) -> str:
    """The hash: the 12 hex digits after the last separator of a base name."""
    return name.rsplit("-", 1)[1]


def test_the_agents_condition_on_the_shipped_cluster_keeps_the_cluster_and_the_node_whole() -> None:
    name = execution_name(event())

    assert name.startswith("training-on-eks-ip-10-0-158-235-")
    # The condition and the time gave way: cut, and the seconds dropped (the hash has them).
    assert name == (f"training-on-eks-ip-10-0-158-235-AcceleratedHardwareR-20261121T1000Z-{digest_of(name)}")
    assert len(name) == MAX_EXECUTION_NAME
    assert re.fullmatch(r"[0-9a-f]{12}", digest_of(name))


def test_a_name_that_fits_is_never_shortened() -> None:
    npd = {**AGENT_XID_79, "type": "GPUProblem", "status": "True", "reason": "GPUFellOffBus"}
    name = execution_name(event(condition=npd))
    assert name == f"training-on-eks-ip-10-0-158-235-GPUProblem-20261121T100000Z-{digest_of(name)}"


@pytest.mark.parametrize("number", [1, 9, 10, 99, 12345, 10**9, 10**15, 10**18, 10**30])
def test_a_re_evaluation_keeps_the_cluster_the_node_and_the_hash_and_fits(number: int) -> None:
    base = execution_name(event())
    name = reevaluation_name(event(), number)

    assert LEGAL.fullmatch(name), name
    assert name.endswith(f"-{digest_of(base)}-r{number}")
    assert name.startswith("training-on-eks-ip-10-0-158-235-"), name
    assert len(name) <= MAX_EXECUTION_NAME


def test_a_re_evaluation_of_a_name_with_room_is_the_base_name_and_the_suffix() -> None:
    npd = {**AGENT_XID_79, "type": "GPUProblem", "status": "True", "reason": "GPUFellOffBus"}
    assert reevaluation_name(event(condition=npd), 7) == execution_name(event(condition=npd)) + "-r7"
    with pytest.raises(ValueError, match="start at 1"):
        reevaluation_name(event(), 0)


@pytest.mark.parametrize("length", [CLUSTER_NAME_CHARS - 1, CLUSTER_NAME_CHARS, CLUSTER_NAME_CHARS + 1, 100])
def test_a_cluster_is_whole_up_to_its_cap_and_cut_to_it_beyond(length: int) -> None:
    # EKS cluster names: 1-100 characters, a letter or digit first, then letters, digits, - and _.
    cluster = ("c" + "luster-" * 20)[:length].rstrip("-").ljust(length, "x")
    kept = cluster[:CLUSTER_NAME_CHARS].rstrip("-")
    for number in (None, 1, 12345, 10**12):
        subject = event(cluster=cluster)
        name = execution_name(subject) if number is None else reevaluation_name(subject, number)
        assert LEGAL.fullmatch(name), name
        assert name.startswith(kept + "-"), (number, name)
        if length <= CLUSTER_NAME_CHARS:
            assert name.startswith(cluster + "-")
        suffix = "" if number is None else f"-r{number}"
        assert name.endswith(suffix)
        # With the cluster at its cap the node still has its first characters, suffix or not.
        if number is None or number < 10**6:
            assert f"{kept}-ip-10-0" in name, name


def test_at_the_longest_cluster_the_node_keeps_its_whole_ec2_name() -> None:
    cluster = "c" * 100
    # The longest EC2 host names: resource names (i- and 17 hex digits) and IP names.
    for node in ("i-0123456789abcdef0.us-west-2.compute.internal", "ip-100-100-100-100.ec2.internal"):
        name = execution_name(event(cluster=cluster, node=node))
        short = node.split(".", 1)[0]
        assert len(short) <= NODE_NAME_CHARS
        # No room is left for the condition and the time: the hash stands for them.
        assert name == f"{'c' * CLUSTER_NAME_CHARS}-{short}-{digest_of(name)}"
        assert len(name) <= MAX_EXECUTION_NAME


def test_names_at_every_limit_stay_legal_deterministic_and_apart() -> None:
    long_node = "n" * 63 + ".example.internal"
    long_condition = {**AGENT_XID_79, "type": "VeryLongVendorSpecificConditionType" * 3}
    for cluster in ("a", "training-on-eks", "c" * 46, "c" * 47, "c" * 48, "c" * 100):
        for node in ("x", "ip-10-0-158-235.us-west-2.compute.internal", long_node):
            subject = event(cluster=cluster, node=node, condition=long_condition)
            names = [execution_name(subject), *(reevaluation_name(subject, n) for n in (1, 99, 10**9))]
            assert all(LEGAL.fullmatch(name) for name in names), names
            assert execution_name(subject) == names[0]  # deterministic
            # Another node object (a new Node that took the name) never shares a name.
            other = event(cluster=cluster, node=node, uid="another-uid", condition=long_condition)
            assert execution_name(other) != names[0]
            assert digest_of(execution_name(other)) != digest_of(names[0])


def test_the_operators_guide_shows_the_names_the_examples_get() -> None:
    root = Path(__file__).resolve().parents[3]
    guide = (root / "docs" / "operations.md").read_text(encoding="utf-8")
    for example in ("xid79-fallen-off-the-bus.json", "nma-xid79.json"):
        document = json.loads((root / "examples" / "events" / example).read_text(encoding="utf-8"))
        name = execution_name(NodeConditionEvent.from_detail(document.get("detail", document)))
        assert f"`{name}`" in guide, (example, name)
