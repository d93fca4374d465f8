"""deploy/karpenter: the example GPU NodePool and EC2NodeClass against Karpenter's v1 CRD schemas.

The schemas (deploy/karpenter/schemas, sources in its README) carry the CRDs' types, enums and
patterns; the CEL rules they cannot express are checked here by hand.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KARPENTER = ROOT / "deploy" / "karpenter"
SCHEMAS = {
    "NodePool": KARPENTER / "schemas" / "nodepool.v1.schema.json",
    "EC2NodeClass": KARPENTER / "schemas" / "ec2nodeclass.v1.schema.json",
}


def documents() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(KARPENTER.glob("*.yaml")):
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def validator(kind: str) -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMAS[kind].read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(document: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(document["kind"]).iter_errors(document)
    ]


def cel_errors(document: dict[str, Any]) -> list[str]:
    """The CRDs' x-kubernetes-validations that matter for these manifests."""
    found = []
    spec = document["spec"]
    if document["kind"] == "NodePool":
        for budget in spec.get("disruption", {}).get("budgets", []):
            if ("schedule" in budget) != ("duration" in budget):
                found.append("'schedule' must be set with 'duration'")
        for requirement in spec["template"]["spec"]["requirements"]:
            if requirement["operator"] == "In" and not requirement.get("values"):
                found.append("requirements with operator 'In' must have a value defined")
        labels = spec["template"].get("metadata", {}).get("labels", {})
        if "karpenter.sh/nodepool" in labels or "kubernetes.io/hostname" in labels:
            found.append("restricted label")
    else:
        terms = spec["amiSelectorTerms"]
        if any("alias" in t for t in terms) and (len(terms) != 1 or len(terms[0]) != 1):
            found.append("'alias' is mutually exclusive")
        for key in spec.get("tags", {}):
            if key.startswith("kubernetes.io/cluster") or key in (
                "karpenter.sh/nodepool",
                "eks:eks-cluster-name",
            ):
                found.append(f"tag {key} is restricted")
    return found


def by_kind(kind: str) -> dict[str, Any]:
    (document,) = [d for d in documents() if d["kind"] == kind]
    return document


def test_every_manifest_is_a_known_karpenter_v1_kind() -> None:
    assert sorted(d["kind"] for d in documents()) == ["EC2NodeClass", "NodePool"]


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_manifests_validate_against_the_crd_schema(kind: str) -> None:
    document = by_kind(kind)
    assert errors(document) == []
    assert cel_errors(document) == []


def test_nodepool_has_the_seed_shape() -> None:
    nodepool = by_kind("NodePool")
    template = nodepool["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in template["taints"]
    assert nodepool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    node_class = by_kind("EC2NodeClass")
    assert template["nodeClassRef"] == {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": node_class["metadata"]["name"],
    }
    categories = next(
        r for r in template["requirements"] if r["key"] == "karpenter.k8s.aws/instance-category"
    )
    assert set(categories["values"]) == {"g", "p"}


def test_nodeclass_requires_imdsv2_and_encrypted_root_volume() -> None:
    spec = by_kind("EC2NodeClass")["spec"]
    assert spec["metadataOptions"]["httpTokens"] == "required"
    (root,) = spec["blockDeviceMappings"]
    assert root["ebs"]["encrypted"] is True


def mutated(kind: str, change: Any) -> dict[str, Any]:
    document = copy.deepcopy(by_kind(kind))
    change(document)
    return document


@pytest.mark.parametrize(
    ("kind", "change", "expected"),
    [
        (
            "NodePool",
            lambda d: d["spec"]["template"]["spec"]["taints"][0].update(effect="NoExecuteNow"),
            "is not one of",
        ),
        (
            "NodePool",
            lambda d: d["spec"]["disruption"].update(consolidationPolicy="WhenUnderutilized"),
            "is not one of",
        ),
        (
            "NodePool",
            lambda d: d["spec"]["disruption"].update(consolidateAfter="20 minutes"),
            "does not match",
        ),
        (
            "NodePool",
            lambda d: d["spec"]["template"]["spec"].pop("nodeClassRef"),
            "'nodeClassRef' is a required property",
        ),
        (
            "NodePool",
            lambda d: d["spec"]["template"]["spec"].update(expireAfter=720),
            "is not of type 'string'",
        ),
        (
            "NodePool",
            lambda d: d["spec"]["template"]["spec"].update(taint=[]),
            "Additional properties are not allowed",
        ),
        ("NodePool", lambda d: d.update(apiVersion="karpenter.sh/v1beta1"), "was expected"),
        (
            "NodePool",
            lambda d: d["spec"]["disruption"]["budgets"].append({"nodes": "110%"}),
            "does not match",
        ),
        (
            "EC2NodeClass",
            lambda d: d["spec"].pop("subnetSelectorTerms"),
            "'subnetSelectorTerms' is a required property",
        ),
        (
            "EC2NodeClass",
            lambda d: d["spec"].update(amiSelectorTerms=[{"alias": "ubuntu@latest"}]),
            "does not match",
        ),
        (
            "EC2NodeClass",
            lambda d: d["spec"]["blockDeviceMappings"][0]["ebs"].update(volumeType="gp4"),
            "is not one of",
        ),
        (
            "EC2NodeClass",
            lambda d: d["spec"].update(instanceProfile="KarpenterNodeInstanceProfile"),
            "is valid under each of",
        ),
        (
            "EC2NodeClass",
            lambda d: d["spec"]["metadataOptions"].update(httpPutResponseHopLimit=0),
            "is less than the minimum",
        ),
    ],
)
def test_schemas_reject_what_the_crds_reject(kind: str, change: Any, expected: str) -> None:
    found = errors(mutated(kind, change))
    assert found, "the schema must refuse this manifest"
    assert any(expected in message for message in found), found


def test_cel_checks_catch_what_the_schema_cannot() -> None:
    bad_budget = mutated(
        "NodePool", lambda d: d["spec"]["disruption"]["budgets"].append({"nodes": "1", "schedule": "@daily"})
    )
    assert cel_errors(bad_budget) == ["'schedule' must be set with 'duration'"]
    mixed = mutated("EC2NodeClass", lambda d: d["spec"]["amiSelectorTerms"].append({"id": "ami-0123"}))
    assert cel_errors(mixed) == ["'alias' is mutually exclusive"]
