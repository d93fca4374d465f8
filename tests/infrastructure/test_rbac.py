"""deploy/rbac/remediator.yaml: valid Kubernetes objects that bind what the workflow needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from stacks.config import NodeHealConfig
from tests.infrastructure.conftest import CDK_JSON, ROOT

MANIFEST = ROOT / "deploy" / "rbac" / "remediator.yaml"
#: EKS standard support starts around here; RBAC v1 has been stable since 1.8.
KUBERNETES_VERSION = "1.33.0"


def documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(Path(MANIFEST).read_text()) if doc]


@pytest.mark.parametrize("document", documents(), ids=lambda doc: str(doc["kind"]))
def test_manifest_is_valid(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_role_grants_exactly_the_workflow_verbs() -> None:
    (role,) = [doc for doc in documents() if doc["kind"] == "ClusterRole"]
    grants = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert grants == {
        ("", "nodes"): ["delete", "get", "list", "patch"],
        ("", "pods"): ["delete", "get", "list"],
        ("", "pods/eviction"): ["create"],
        ("policy", "poddisruptionbudgets"): ["list"],
    }


def test_binding_subject_is_the_configured_kubernetes_group() -> None:
    config = NodeHealConfig.from_cdk_context(CDK_JSON["context"]["nodeheal"])
    (role,) = [doc for doc in documents() if doc["kind"] == "ClusterRole"]
    (binding,) = [doc for doc in documents() if doc["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": config.kubernetes_group}
    ]
