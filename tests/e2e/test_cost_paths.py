"""`make bench`'s per-path counts, on real paths: each count belongs to the path it is printed for.

The bench runs every path (``benchmarks/cost_scenarios.py``); this runs three short ones through
the same local pipeline and holds the counts to what each path must and must not send."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.cost_scenarios import measure

#: Requests that change the cluster or the instance: only a path that mutates may send them.
MUTATING_KUBERNETES = ("PATCH", "POST", "DELETE", "PUT")


def _mutations(path: dict[str, Any]) -> list[str]:
    kubernetes = [
        request
        for request in path["kubernetesByRequest"]
        if request.split(" ", 1)[0] in MUTATING_KUBERNETES and "/events" not in request
    ]
    ec2 = [op for op in path["awsByOperation"] if op in ("ec2:RebootInstances", "ec2:TerminateInstances")]
    return kubernetes + ec2


@pytest.fixture(scope="module")
def counted() -> dict[str, Any]:
    return measure(only=("replace", "record", "refused"))["paths"]


def test_replace_cordons_evicts_and_terminates_and_pays_for_each_step(counted: dict[str, Any]) -> None:
    replace = counted["replace"]
    assert replace["outcome"] == "replaced"
    assert replace["awsByOperation"].get("ec2:TerminateInstances") == 1
    assert any(r.startswith("PATCH /api/v1/nodes/") for r in replace["kubernetesByRequest"])
    assert any(r.endswith("/eviction") for r in replace["kubernetesByRequest"])
    assert replace["transitions"] > replace["lambdaInvocations"] > counted["record"]["lambdaInvocations"]
    assert replace["dynamodbCalls"] > counted["refused"]["dynamodbCalls"] > 0


@pytest.mark.parametrize("key", ["record", "refused"])
def test_a_path_that_touches_nothing_sends_no_mutation(counted: dict[str, Any], key: str) -> None:
    path = counted[key]
    assert path["outcome"] == {"record": "recorded", "refused": "refused"}[key]
    assert _mutations(path) == []
    assert path["lambdaInvocations"] == 2  # admit, then the record step
    assert path["transitions"] < counted["replace"]["transitions"]
    # Ingest's calls are counted apart: it starts the execution, named for dedup, and no more.
    assert path["ingest"]["awsByOperation"] == {"states:StartExecution": 1}
    assert path["ingest"]["kubernetesRequests"] == 0


def test_the_refused_path_alerts_once_and_writes_its_refusal(counted: dict[str, Any]) -> None:
    refused, record = counted["refused"], counted["record"]
    assert refused["awsByOperation"].get("sns:Publish") == 1
    assert "sns:Publish" not in record["awsByOperation"]
    # Both read the node once; the refusal is also written to the cluster's admission state, where
    # the breaker counts it, so the refused path writes more than the record-only one.
    assert refused["kubernetesRequests"] == record["kubernetesRequests"]
    assert refused["dynamodbByOperation"]["PutItem"] > record["dynamodbByOperation"]["PutItem"]


def test_an_unknown_path_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="no such cost path: nope"):
        measure(only=("nope",))
    with pytest.raises(ValueError, match="needs a path that starts a remediation"):
        measure(only=("record", "refused"))
