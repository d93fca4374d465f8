"""deploy/exporter: every resource the kustomization lists is valid against the Kubernetes 1.33+
schemas, and the Deployment has the properties the issue requires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nodeheal.exporter.settings import OPTIONS, env_name

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "exporter"
COMPONENT = BASE / "components" / "node-events"
VERSIONS = ("1.33.0", "1.34.0", "1.35.0")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def resource_files() -> list[Path]:
    files = [BASE / name for name in yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]]
    files += [
        COMPONENT / name
        for name in yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())["resources"]
    ]
    return files


def by_kind(kind: str) -> dict[str, Any]:
    for path in resource_files():
        for doc in documents(path):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no {kind} in deploy/exporter")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", resource_files(), ids=lambda p: p.relative_to(BASE).as_posix())
def test_resource_is_valid_against_the_schema(path: Path, version: str) -> None:
    for doc in documents(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_kustomization_lists_every_manifest_in_the_directory() -> None:
    listed = {path.name for path in resource_files() if path.parent == BASE}
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_deployment_runs_two_hardened_replicas_with_probes() -> None:
    deployment = by_kind("Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {item["name"] for item in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env
    assert pod["serviceAccountName"] == by_kind("ServiceAccount")["metadata"]["name"]


def test_rbac_is_read_only_on_nodes_and_lease_scoped() -> None:
    (rule,) = by_kind("ClusterRole")["rules"]
    assert (rule["resources"], sorted(rule["verbs"])) == (["nodes"], ["list", "watch"])
    lease_rules = by_kind("Role")["rules"]
    assert all(r["resources"] == ["leases"] for r in lease_rules)
    scoped = [r for r in lease_rules if "resourceNames" in r]
    config = by_kind("ConfigMap")["data"]
    assert scoped[0]["resourceNames"] == [config["NODEHEAL_LEASE_NAME"]]
    events_rules = documents(COMPONENT / "clusterrole.yaml")[0]["rules"]
    assert events_rules == [{"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]}]


#: Environment the AWS SDK reads, not the exporter's own settings: the bus's region (Pod Identity
#: supplies no region, and pods often cannot reach the instance metadata service for one).
SDK_ENVIRONMENT = {"AWS_DEFAULT_REGION"}


def test_configmap_keys_are_exporter_settings() -> None:
    known = {env_name(option.name) for option in OPTIONS}
    config = by_kind("ConfigMap")["data"]
    patch = documents(COMPONENT / "configmap-patch.yaml")[0]["data"]
    assert set(config) <= known | SDK_ENVIRONMENT and set(patch) <= known
    assert config["NODEHEAL_LEADER_ELECTION"] == "true"


def test_the_configmap_names_the_region_the_events_client_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a region the exporter's EventBridge client cannot be built: boto3 refuses."""
    from botocore.exceptions import NoRegionError

    from nodeheal.exporter.app import make_events_client

    config = by_kind("ConfigMap")
    region = config["data"]["AWS_DEFAULT_REGION"]
    (container,) = by_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    assert {"configMapRef": {"name": config["metadata"]["name"]}} in container["envFrom"]
    # A pod as Pod Identity leaves it: credentials, no region, no instance metadata in reach.
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(NoRegionError):
        make_events_client()
    # boto3 does not read AWS_REGION: only AWS_DEFAULT_REGION gives the client its region.
    monkeypatch.setenv("AWS_REGION", region)
    with pytest.raises(NoRegionError):
        make_events_client()
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    assert make_events_client().meta.region_name == region
