"""docs/deploy.md against the code it describes: which functions run in the VPC and which AWS APIs
they call, the order of the manifests, the log groups a `cdk destroy` removes, the cost table's
arithmetic, and the exporter's numbers. A change to any of them that the guide does not follow
fails here. (tests/infrastructure/test_deploy_doc.py checks the guide against the synthesized
template.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from benchmarks.cost_scenarios import PATHS
from benchmarks.run_all import PRICES
from nodeheal.cdk.constructs.finalizer import SWEEP_INTERVAL
from nodeheal.cdk.workflow_tasks import ALL_TASKS, INGEST_TASK, WORKFLOW_TASKS, TaskSpec
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.exporter.settings import ExporterSettings

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "deploy.md").read_text()
SHIPPED = NodeHealConfig.from_cdk_context(json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"])
IN_VPC = [spec for spec in WORKFLOW_TASKS if spec.kubernetes]
#: Seconds in the 30-day month the guide counts heartbeats and sweeps over.
MONTH_SECONDS = 30 * 24 * 3600


def section(title: str) -> str:
    start = GUIDE.index(f"\n## {title}")
    end = GUIDE.find("\n## ", start + 1)
    return GUIDE[start : end if end != -1 else len(GUIDE)]


def table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with ``header``."""
    lines = text[text.index(header) :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def names(cell: str) -> set[str]:
    return {name.strip() for name in cell.split(",")}


def test_only_the_kubernetes_facing_functions_run_in_the_vpc() -> None:
    ((inside, outside),) = table(section("7. Clusters with a private API endpoint"), "| in the VPC |")
    assert names(inside) == {spec.name for spec in IN_VPC}
    assert names(outside) == {spec.name for spec in ALL_TASKS} - names(inside)


def needs(spec: TaskSpec, service: str) -> bool:
    return {
        "Amazon EKS": spec.kubernetes,
        "Amazon DynamoDB": bool(spec.ledger),
        "Amazon EC2": bool(spec.ec2_mutations) or spec.ec2_describe,
    }[service]


def test_the_endpoint_table_names_every_api_the_functions_in_the_vpc_call() -> None:
    rows = table(section("7. Clusters with a private API endpoint"), "| service | endpoint |")
    assert [row[0] for row in rows] == ["Amazon EKS", "Amazon DynamoDB", "Amazon EC2"]
    for service, endpoint, callers, _ in rows:
        assert names(callers) == {spec.name for spec in IN_VPC if needs(spec, service)}, service
        assert re.fullmatch(r"`com\.amazonaws\.REGION\.(eks|dynamodb|ec2)` \((interface|gateway).*", endpoint)


def test_no_function_in_the_vpc_calls_sns_or_step_functions() -> None:
    """The guide says they need neither endpoint: their handlers never build those clients."""
    for spec in IN_VPC:
        assert not spec.publishes_notifications
        source = (ROOT / "lambdas" / f"{spec.handler.split('.')[1]}.py").read_text()
        assert not re.search(r"\brt\.(notifier|starter|executions)\b", source), spec.name
    assert "None of them calls STS" in section("7. Clusters with a private API endpoint")


def test_the_manifests_are_applied_in_the_order_the_guide_explains() -> None:
    steps = section("5. Apply the cluster side, in this order")
    block = steps[steps.index("```bash") : steps.index("```", steps.index("```bash") + 3)]
    order = [
        "kubectl apply -f deploy/rbac/remediator.yaml",
        "deploy/exporter/configmap.yaml",
        "kustomize edit set image nodeheal-exporter=",
        "kubectl apply -k deploy/exporter",
        "deploy/node-problem-detector/values.yaml",
    ]
    positions = [block.index(step) for step in order]
    assert positions == sorted(positions)
    config = yaml.safe_load((ROOT / "deploy" / "exporter" / "configmap.yaml").read_text())
    for key in re.findall(r"\b(NODEHEAL_[A-Z_]+|AWS_REGION)\b", block):
        assert key in config["data"], key
    kustomization = yaml.safe_load((ROOT / "deploy" / "exporter" / "kustomization.yaml").read_text())
    assert [image["name"] for image in kustomization["images"]] == ["nodeheal-exporter"]
    deployment = yaml.safe_load((ROOT / "deploy" / "exporter" / "deployment.yaml").read_text())
    meta = deployment["metadata"]
    assert f"kubectl -n {meta['namespace']} rollout status deployment/{meta['name']}" in block


def test_the_uninstall_names_every_log_group_the_stack_removes() -> None:
    step = section("11. Uninstall")
    listed = set(re.findall(r"`(/aws/(?:lambda|vendedlogs/states)/[\w-]+)`", step))
    functions = ALL_TASKS
    assert listed == {f"/aws/lambda/{SHIPPED.stack_name}-{spec.name}" for spec in functions} | {
        f"/aws/vendedlogs/states/{SHIPPED.state_machine_name}"
    }


def dollars(transitions: int, calls: int, gb_seconds: float) -> float:
    price = {key: value for key, (value, _) in PRICES.items()}
    ingest_gb_seconds = 0.438 * INGEST_TASK.memory_mb / 1024
    return (
        transitions * price["stepFunctionsPerTransition"]
        + (gb_seconds + ingest_gb_seconds) * price["lambdaPerGbSecond"]
        + (calls + 1) * price["lambdaPerRequest"]
        + price["eventBridgePerCustomEvent"]
    )


def test_the_cost_table_covers_every_measured_path_priced_as_the_benchmark_prices_it() -> None:
    costs = section("8. What it costs")
    assert f"{INGEST_TASK.memory_mb} MB" in costs
    rows = table(costs, "| path | transitions |")
    assert [row[0] for row in rows] == [path.title for path in PATHS]
    for title, transitions, calls, gb_seconds, price in rows:
        expected = dollars(int(transitions), int(calls), float(gb_seconds))
        assert price == f"${expected:.5f}", title


EXPORTER = ExporterSettings(cluster_name="training-on-eks")


@pytest.mark.parametrize(
    ("claim", "number", "value"),
    [
        ("one every 60 s", 60, EXPORTER.heartbeat_seconds),
        ("43,200 custom events", 43_200, MONTH_SECONDS / EXPORTER.heartbeat_seconds),
        ("43,200 short ingest invocations", 43_200, MONTH_SECONDS / EXPORTER.heartbeat_seconds),
        ("finalize runs every 5 minutes", 5, SWEEP_INTERVAL.to_minutes()),
        ("8,640 invocations a month", 8_640, MONTH_SECONDS / SWEEP_INTERVAL.to_seconds()),
    ],
)
def test_the_idle_traffic_follows_the_heartbeat_and_the_sweep(claim: str, number: int, value: float) -> None:
    assert claim in " ".join(section("8. What it costs").split())
    assert number == value


def test_the_upgrade_numbers_are_the_exporters_defaults() -> None:
    upgrades = section("10. Upgrades")
    settings = EXPORTER
    assert f"within about {settings.lease_duration_seconds:.0f} s" in upgrades
    assert f"the last {settings.standby_replay_seconds:.0f} s" in upgrades


def test_the_readme_points_to_the_guide_and_stays_short() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Deploying to an AWS account")
    summary = readme[start : readme.index("\n### ", start)]
    assert "[docs/deploy.md](docs/deploy.md)" in summary
    assert len(summary.strip().splitlines()) <= 16


def test_the_guide_says_what_owner_is_in_the_released_image_path() -> None:
    """The release workflow pushes under the lower-cased owner of the repository the tag ran in."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    (naming,) = [
        step for step in workflow["jobs"]["exporter-image"]["steps"] if step.get("name") == "Image name"
    ]
    assert (
        naming["run"]
        == 'echo "IMAGE=ghcr.io/${GITHUB_REPOSITORY_OWNER,,}/nodeheal-exporter" >> "${GITHUB_ENV}"'
    )
    image = section("4. The exporter image")
    assert set(re.findall(r"ghcr\.io/(\w+)/nodeheal-exporter", image)) == {"OWNER"}
    text = " ".join(image.split())
    assert "`OWNER` is the GitHub user or organization that owns the repository" in text
    assert "in lower case" in text and "`GITHUB_REPOSITORY_OWNER`" in text


def test_the_build_step_names_the_security_scanners_virtualenv() -> None:
    makefile = (ROOT / "Makefile").read_text()
    scan_venv = re.search(r"^SCAN_VENV := (\S+)$", makefile, flags=re.MULTILINE)
    assert scan_venv
    # make synth bootstraps it with the rest.
    assert re.search(r"^synth: bootstrap\b", makefile, flags=re.MULTILINE)
    assert "$(SCAN_VENV)/.installed" in makefile.split("\nbootstrap:", 1)[1].split("\n\n", 1)[0]
    build = " ".join(section("3. Build and deploy the stack").split())
    assert f"`{scan_venv.group(1)}/`" in build and "security scanner" in build
