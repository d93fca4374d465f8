"""deploy/rbac/remediator.yaml and deploy/exporter: valid Kubernetes objects, equal to the rules of
nodeheal/rbac.py (which the fake API server enforces in the workflow and end-to-end tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nodeheal.cdk.workflow_tasks import WORKFLOW_TASKS
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.rbac import (
    EXPORTER_ROLES,
    EXPORTER_SERVICE_ACCOUNT,
    KUBERNETES_RULES,
    NODE_DELETE,
    NODECLAIM_DELETE,
    function_roles,
    markdown_table,
    render_manifest,
)
from tests.infrastructure.conftest import CDK_JSON, ROOT

MANIFEST = ROOT / "deploy" / "rbac" / "remediator.yaml"
EXPORTER = ROOT / "deploy" / "exporter"
#: EKS standard support starts around here; RBAC v1 has been stable since 1.8.
KUBERNETES_VERSION = "1.33.0"


def documents(path: Path = MANIFEST) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str, path: Path = MANIFEST) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents(path) if doc["kind"] == kind}


def config() -> NodeHealConfig:
    return NodeHealConfig.from_cdk_context(CDK_JSON["context"]["nodeheal"])


@pytest.mark.parametrize("document", documents(), ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}")
def test_manifest_is_valid(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_defect_10_manifest_is_rendered_from_the_python_table() -> None:
    prefix = config().kubernetes_group_prefix
    assert MANIFEST.read_text() == render_manifest(prefix), (
        "deploy/rbac/remediator.yaml is out of date with nodeheal/rbac.py: run `make rbac`"
    )


def test_defect_10_one_cluster_role_per_kubernetes_function() -> None:
    kubernetes_tasks = {spec.name for spec in WORKFLOW_TASKS if spec.kubernetes}
    assert set(KUBERNETES_RULES) == kubernetes_tasks
    prefix = config().kubernetes_group_prefix
    roles = of_kind("ClusterRole")
    assert set(roles) == {role.name(prefix) for role in function_roles()}
    for role in function_roles():
        assert roles[role.name(prefix)]["rules"] == [rule.to_manifest() for rule in role.rules]


def test_defect_10_each_binding_names_its_own_group() -> None:
    bindings = of_kind("ClusterRoleBinding")
    assert set(bindings) == set(of_kind("ClusterRole"))
    for name, binding in bindings.items():
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        }
        assert binding["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}
        ]


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_defect_10_least_privilege_in_the_manifest() -> None:
    prefix = config().kubernetes_group_prefix
    roles = {name: grants(role) for name, role in of_kind("ClusterRole").items()}
    events = {("", "events", "create"), ("events.k8s.io", "events", "create")}
    for name, granted in roles.items():
        assert not any(verb == "*" or resource == "*" for _, resource, verb in granted), name
        if name not in (NODE_DELETE.name(prefix), NODECLAIM_DELETE.name(prefix)):
            assert events <= granted, f"D8: every function may create Events ({name})"
    # admit and check-recovery only read, and only nodes and pods.
    for reader in ("admit", "check-recovery"):
        other = roles[f"{prefix}-{reader}"] - events
        assert {verb for _, _, verb in other} <= {"get", "list", "watch"}
        assert {resource for _, resource, _ in other} <= {"nodes", "pods"}
    # Pods only for the drain steps; node delete only in the optional terminate role.
    for name, granted in roles.items():
        if any(resource.startswith("pods") for _, resource, _ in granted):
            assert name in (f"{prefix}-drain", f"{prefix}-force-drain"), name
        if ("", "nodes", "delete") in granted:
            assert name == NODE_DELETE.name(prefix)
    assert roles[NODE_DELETE.name(prefix)] == {("", "nodes", "delete")}
    # Karpenter's NodeClaims only in the optional terminate role of replace.method delete-nodeclaim:
    # list to find the one bound to the instance, delete to hand the instance to Karpenter.
    for name, granted in roles.items():
        if any(group == "karpenter.sh" for group, _, _ in granted):
            assert name == NODECLAIM_DELETE.name(prefix)
    assert roles[NODECLAIM_DELETE.name(prefix)] == {
        ("karpenter.sh", "nodeclaims", "list"),
        ("karpenter.sh", "nodeclaims", "delete"),
    }


def test_defect_10_exporter_manifests_match_the_python_table() -> None:
    declared = {
        **of_kind("ClusterRole", EXPORTER / "clusterrole.yaml"),
        **of_kind("Role", EXPORTER / "role.yaml"),
        **of_kind("ClusterRole", EXPORTER / "clusterrole-node-events.yaml"),
    }
    assert set(declared) == {role.name for role in EXPORTER_ROLES}
    for role in EXPORTER_ROLES:
        document = declared[role.name]
        assert document["rules"] == [rule.to_manifest() for rule in role.rules], role.name
        assert document["metadata"].get("namespace", "") == role.namespace
    bindings = [
        *documents(EXPORTER / "clusterrolebinding.yaml"),
        *documents(EXPORTER / "rolebinding.yaml"),
        *documents(EXPORTER / "clusterrolebinding-node-events.yaml"),
    ]
    assert {binding["roleRef"]["name"] for binding in bindings} == set(declared)
    for binding in bindings:
        (subject,) = binding["subjects"]
        assert (subject["kind"], subject["name"]) == ("ServiceAccount", EXPORTER_SERVICE_ACCOUNT)


def test_defect_10_readme_rbac_table_is_the_python_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_table(config().kubernetes_group_prefix) in readme, "README's RBAC table is out of date"
