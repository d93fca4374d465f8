"""deploy/exporter: every resource the kustomization and its components list is valid against the
Kubernetes 1.33+ schemas (the ServiceMonitor against its CRD's), the references between them
resolve as kustomize and the API server would resolve them, and the Deployment has the properties
the issues require. There is no kustomize or kubectl here: the YAML is read as kustomize reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from nodeheal.exporter.settings import OPTIONS, default_text, env_name, load_settings

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "exporter"
COMPONENTS = BASE / "components"
SERVICE_MONITOR = COMPONENTS / "servicemonitor"
VERSIONS = ("1.33.0", "1.34.0", "1.35.0")
#: Kinds that come from CRDs, validated against the schema next to them instead of Kubernetes'.
CRD_SCHEMAS = {"ServiceMonitor": BASE / "schemas" / "servicemonitor.v1.schema.json"}
#: The ceiling the API server puts on a user-defined PriorityClass (scheduling.HighestUserDefinablePriority).
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomization(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return loaded


def component_dirs() -> list[Path]:
    return sorted(path.parent for path in COMPONENTS.glob("*/kustomization.yaml"))


def resource_files() -> list[Path]:
    files = [BASE / name for name in kustomization(BASE)["resources"]]
    for directory in component_dirs():
        files += [directory / name for name in kustomization(directory).get("resources", [])]
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
        if doc["kind"] in CRD_SCHEMAS:
            schema = json.loads(CRD_SCHEMAS[doc["kind"]].read_text())
            jsonschema.Draft7Validator.check_schema(schema)
            jsonschema.Draft7Validator(schema).validate(doc)
        else:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_servicemonitor_schema_catches_what_the_api_server_would_refuse_or_prune() -> None:
    schema = json.loads(CRD_SCHEMAS["ServiceMonitor"].read_text())
    monitor = by_kind("ServiceMonitor")
    broken = [
        {
            **monitor,
            "spec": {
                **monitor["spec"],
                "endpoints": [{**monitor["spec"]["endpoints"][0], "interval": "30 s"}],
            },
        },
        {
            **monitor,
            "spec": {**monitor["spec"], "endpoints": [{**monitor["spec"]["endpoints"][0], "prot": "http"}]},
        },
        {**monitor, "spec": {"endpoints": monitor["spec"]["endpoints"]}},  # selector is required
    ]
    for document in broken:
        assert list(jsonschema.Draft7Validator(schema).iter_errors(document)), document["spec"]


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


def test_rbac_is_read_only_on_nodes_and_events_and_lease_scoped() -> None:
    (rule,) = by_kind("ClusterRole")["rules"]
    assert (rule["resources"], sorted(rule["verbs"])) == (["nodes"], ["list", "watch"])
    lease_rules = by_kind("Role")["rules"]
    assert all(r["resources"] == ["leases"] for r in lease_rules)
    scoped = [r for r in lease_rules if "resourceNames" in r]
    config = by_kind("ConfigMap")["data"]
    assert scoped[0]["resourceNames"] == [config["NODEHEAL_LEASE_NAME"]]
    # Node Events ship by default, so the base grants what their watch needs, and only that.
    events_rules = documents(BASE / "clusterrole-node-events.yaml")[0]["rules"]
    assert events_rules == [{"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]}]


def test_configmap_keys_are_exporter_settings() -> None:
    known = {env_name(option.name) for option in OPTIONS} | {"AWS_REGION"}
    config = by_kind("ConfigMap")["data"]
    assert set(config) <= known
    assert config["NODEHEAL_LEADER_ELECTION"] == "true"


def test_the_shipped_configmap_ships_warning_node_events_as_the_default_does() -> None:
    config = by_kind("ConfigMap")["data"]
    shipped = load_settings({}, config)
    default = load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c", "AWS_REGION": "us-west-2"})
    assert shipped.ship_node_events is default.ship_node_events is True
    assert shipped.node_event_types == default.node_event_types == ("Warning",)
    assert shipped.node_event_reasons == default.node_event_reasons == ()


def test_the_shipped_configmap_loads_and_names_the_region_explicitly() -> None:
    config = by_kind("ConfigMap")["data"]
    assert load_settings({}, config).aws_region == config["AWS_REGION"] != ""
    # The bus given as the stack's EventBusArn output agrees with the region, or start is refused.
    arn = f"arn:aws:events:{config['AWS_REGION']}:111122223333:event-bus/{config['NODEHEAL_EVENT_BUS']}"
    assert load_settings({}, {**config, "NODEHEAL_EVENT_BUS": arn}).aws_region == config["AWS_REGION"]


# --- references between the manifests ---------------------------------------------------------------


def test_every_kustomization_reference_resolves() -> None:
    for directory in [BASE, *component_dirs()]:
        spec = kustomization(directory)
        for name in spec.get("resources", []):
            assert (directory / name).is_file(), f"{directory.name}: resource {name}"
        for patch in spec.get("patches", []):
            path = directory / patch["path"]
            assert path.is_file(), f"{directory.name}: patch {patch['path']}"
            # A strategic-merge patch applies to the base resource of the same kind and name.
            for target in documents(path):
                match = by_kind(target["kind"])
                assert match["metadata"]["name"] == target["metadata"]["name"], path
        for component in spec.get("components", []):
            assert (directory / component / "kustomization.yaml").is_file(), f"{directory.name}: {component}"
    for directory in component_dirs():
        spec = kustomization(directory)
        assert (spec["apiVersion"], spec["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
        listed = set(spec.get("resources", [])) | {p["path"] for p in spec.get("patches", [])}
        assert listed == {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}, directory.name


def test_the_servicemonitor_is_opt_in() -> None:
    # Its CRD exists only where the Prometheus Operator runs: `kubectl apply -k` of the base must not need it.
    base = kustomization(BASE)
    assert not any("servicemonitor" in entry for entry in [*base["resources"], *base.get("components", [])])
    # Every kind of the base is built in (validated by kubernetes_validate above), none from a CRD.
    base_kinds = {doc["kind"] for path in resource_files() if path.parent == BASE for doc in documents(path)}
    assert base_kinds.isdisjoint(CRD_SCHEMAS)


def test_the_service_and_the_servicemonitor_reach_the_metrics_port() -> None:
    deployment = by_kind("Deployment")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    config = by_kind("ConfigMap")["data"]
    http_port = int(config.get("NODEHEAL_HTTP_PORT", default_text("http_port")))
    assert ports["http"] == http_port
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(http_port)
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"

    service = by_kind("Service")
    selector = service["spec"]["selector"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] in ports and service_port["port"] == http_port

    monitor = by_kind("ServiceMonitor")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service_port["name"]
    assert endpoint["path"] == "/metrics"


def test_the_exporter_runs_at_its_own_priority_class() -> None:
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    priority = by_kind("PriorityClass")
    assert pod["priorityClassName"] == priority["metadata"]["name"]
    # ValidatePriorityClass: the "system-" prefix is reserved, user classes stay at or below 1e9.
    assert not priority["metadata"]["name"].startswith("system-")
    assert 0 < priority["value"] <= HIGHEST_USER_DEFINABLE_PRIORITY
    assert priority["globalDefault"] is False  # it must not raise every other pod of the cluster
    assert "namespace" not in priority["metadata"]  # cluster-scoped
