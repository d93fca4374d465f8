"""checkov 3.3, the scanner security reviews run, over what NodeHeal ships, offline.

Three scans: the template of the shipped cdk.json (``stack``), the same with
``security.kmsKeyArn`` (``stack+key``), and the manifests under deploy/ (``deploy``). The checks
that matter for NodeHeal pass (the targets below), and every check that fails is listed in the
README's "Security scanner findings" table with its reason: a new finding, or one fixed without
updating the table, fails here, so the table cannot drift from the scanner.

checkov pins boto3 1.35 and so cannot share the project's virtualenv; ``make bootstrap`` installs it
from requirements-scan.txt into ``.venv-checkov``. Its network features are off: no platform key
(``BC_API_KEY`` and the Prisma variables are removed), ``--skip-download`` (no guidelines, policies
or suppressions from the platform), ``BC_SKIP_MAPPING`` and ``CKV_SKIP_PACKAGE_UPDATE_CHECK`` (no
version check against PyPI); the runner below refuses every connection and reports any attempt.
Both scans together take about 20 s on two cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from nodeheal.image_pin import BASE_IMAGE_NAME, PinnedImage, pin
from tests.infrastructure.conftest import Synthesized

ROOT = Path(__file__).resolve().parents[2]
SCAN_PYTHON = ROOT / ".venv-checkov" / "bin" / "python"
README = ROOT / "README.md"
SCANS = ("stack", "stack+key", "deploy")
#: The rendered release overlay's Deployment, scanned beside deploy/ (not one of the README's scans).
RELEASE = "release"

#: Runs checkov with every socket connection refused and reported on stderr.
RUNNER = """
import socket, sys
def refuse(*args, **kwargs):
    sys.stderr.write("NETWORK ATTEMPT %r\\n" % (args,))
    raise OSError("the security scan runs offline")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from checkov.main import Checkov
sys.exit(Checkov(sys.argv[1:]).run())
"""
OFFLINE_ENVIRONMENT = {
    "BC_SKIP_MAPPING": "TRUE",
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "True",
    "LOG_LEVEL": "WARNING",
}
PLATFORM_VARIABLES = ("BC_API_KEY", "BC_API_URL", "PRISMA_API_URL", "BC_CA_BUNDLE")


@dataclass(frozen=True)
class Result:
    scan: str
    check_id: str
    resource_type: str
    resource: str
    passed: bool


def run_checkov(directory: Path, framework: str) -> list[Result]:
    """Every check result for the files under ``directory``; the scan is the top-level folder."""
    assert SCAN_PYTHON.exists(), (
        f"checkov is not installed in {SCAN_PYTHON.parent.parent}: run `make bootstrap` "
        "(it installs requirements-scan.txt there)"
    )
    environment = {k: v for k, v in os.environ.items() if k not in PLATFORM_VARIABLES}
    arguments = ["-d", str(directory), "--framework", framework, "--skip-download", "--output", "json"]
    completed = subprocess.run(
        [str(SCAN_PYTHON), "-c", RUNNER, *arguments, "--compact"],
        cwd=directory,
        env={**environment, **OFFLINE_ENVIRONMENT},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert "NETWORK ATTEMPT" not in completed.stderr, completed.stderr
    # 1 means "some check failed"; anything else is checkov itself failing.
    assert completed.returncode in (0, 1), completed.stderr
    reports = json.loads(completed.stdout)
    results: list[Result] = []
    for report in reports if isinstance(reports, list) else [reports]:
        assert report["check_type"] == framework
        assert report["summary"]["parsing_errors"] == 0, report["results"].get("parsing_errors")
        for passed, key in ((True, "passed_checks"), (False, "failed_checks")):
            for check in report["results"][key]:
                results.append(
                    Result(
                        scan=Path(check["file_path"].lstrip("/")).parts[0],
                        check_id=check["check_id"],
                        resource_type=check["resource"].split(".", 1)[0],
                        resource=check["resource"],
                        passed=passed,
                    )
                )
    return results


def render_release(deploy: Path, reference: str) -> Path:
    """The release overlay's Deployment as kustomize renders it once ``make pin-image`` has run.

    ``pin`` writes the real component; its image entry replaces the base image name with the
    repository at the digest, which is what kustomize's images transformer does to the Deployment
    (checked against ``kubectl kustomize`` v5.5 when the overlay was written).
    """
    image = PinnedImage.parse(reference)
    component = yaml.safe_load(pin(image, deploy / "exporter-release").read_text())
    (entry,) = [e for e in component["images"] if e["name"] == BASE_IMAGE_NAME]
    deployment = yaml.safe_load((deploy / "exporter" / "deployment.yaml").read_text())
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        assert container["image"] == entry["name"]
        container["image"] = f"{entry['newName']}@{entry['digest']}"
    target = deploy.parent / RELEASE / "deployment.yaml"
    target.parent.mkdir()
    target.write_text(yaml.safe_dump(deployment))
    return target


def write_template(directory: Path, synthesized: Synthesized) -> None:
    directory.mkdir(parents=True)
    (directory / f"{synthesized.config.stack_name}.template.json").write_text(json.dumps(synthesized.json))


@dataclass(frozen=True)
class Scanned:
    results: list[Result]
    stack: Synthesized
    keyed: Synthesized

    def of(self, scan: str, check_id: str) -> dict[str, bool]:
        """Resource -> passed, for one check in one scan."""
        return {r.resource: r.passed for r in self.results if (r.scan, r.check_id) == (scan, check_id)}

    def failing(self) -> set[tuple[str, str, str]]:
        return {
            (r.scan, r.check_id, r.resource_type) for r in self.results if not r.passed and r.scan in SCANS
        }


@pytest.fixture(scope="module")
def scanned(
    default_stack: Synthesized, keyed_stack: Synthesized, tmp_path_factory: pytest.TempPathFactory
) -> Scanned:
    templates = tmp_path_factory.mktemp("templates")
    write_template(templates / "stack", default_stack)
    write_template(templates / "stack+key", keyed_stack)
    manifests = tmp_path_factory.mktemp("manifests")
    deploy = manifests / "deploy"
    # A developer's own pin (ignored by git) must not change what is scanned.
    shutil.copytree(ROOT / "deploy", deploy, ignore=shutil.ignore_patterns("pinned-image"))
    render_release(
        deploy, f"123456789012.dkr.ecr.us-west-2.amazonaws.com/nodeheal-exporter@sha256:{'ab' * 32}"
    )
    # The two scans are separate processes: run them side by side.
    with ThreadPoolExecutor(max_workers=2) as pool:
        cloudformation = pool.submit(run_checkov, templates, "cloudformation")
        kubernetes = pool.submit(run_checkov, manifests, "kubernetes")
        results = cloudformation.result() + kubernetes.result()
    return Scanned(results=results, stack=default_stack, keyed=keyed_stack)


def logical_ids(synthesized: Synthesized, resource_type: str) -> set[str]:
    return {f"{resource_type}.{logical_id}" for logical_id in synthesized.resources(resource_type)}


def test_every_scan_ran(scanned: Scanned) -> None:
    assert {r.scan for r in scanned.results} == {*SCANS, RELEASE}


@pytest.mark.parametrize("scan", ["stack", "stack+key"])
def test_the_dead_letter_queues_are_encrypted_with_a_key(scanned: Scanned, scan: str) -> None:
    """CKV_AWS_27: a KMS key on every queue (SQS-managed SSE does not count, and EventBridge needs a
    key whose policy admits it)."""
    synthesized = scanned.stack if scan == "stack" else scanned.keyed
    queues = logical_ids(synthesized, "AWS::SQS::Queue")
    assert len(queues) == 4  # ingest's and the counting function's: delivery and failure each
    assert scanned.of(scan, "CKV_AWS_27") == dict.fromkeys(queues, True)


def test_with_a_customer_key_every_log_group_and_the_ledger_use_it(scanned: Scanned) -> None:
    log_groups = logical_ids(scanned.keyed, "AWS::Logs::LogGroup")
    assert len(log_groups) == 15  # 14 functions and the state machine
    assert scanned.of("stack+key", "CKV_AWS_158") == dict.fromkeys(log_groups, True)
    ledger = logical_ids(scanned.keyed, "AWS::DynamoDB::Table")
    assert scanned.of("stack+key", "CKV_AWS_119") == dict.fromkeys(ledger, True)


@pytest.mark.parametrize("scan", ["stack", "stack+key"])
def test_ingest_has_reserved_concurrency(scanned: Scanned, scan: str) -> None:
    synthesized = scanned.stack if scan == "stack" else scanned.keyed
    name = f"{synthesized.config.stack_name}-ingest"
    (ingest,) = [
        f"AWS::Lambda::Function.{logical_id}"
        for logical_id, resource in synthesized.resources("AWS::Lambda::Function").items()
        if resource["Properties"].get("FunctionName") == name
    ]
    assert scanned.of(scan, "CKV_AWS_115")[ingest] is True


def test_the_exporter_pods_have_a_network_policy(scanned: Scanned) -> None:
    results = scanned.of("deploy", "CKV2_K8S_6")
    assert results, "CKV2_K8S_6 found no pod"
    assert all(results.values()), results


def test_the_release_overlay_pins_the_image_by_digest(scanned: Scanned) -> None:
    for check_id in ("CKV_K8S_14", "CKV_K8S_15", "CKV_K8S_43"):
        results = scanned.of(RELEASE, check_id)
        assert results and all(results.values()), (check_id, results)


# -- the README table ------------------------------------------------------------------------------

FINDINGS_HEADING = "### Security scanner findings"
_CHECK_ID = re.compile(r"`(CKV2?_[A-Z0-9]+_\d+)`")


def documented_findings(readme: str) -> Iterator[tuple[str, str, str, str]]:
    """(scan, check id, resource type, reason) for every row of the README's findings table."""
    section = readme.split(FINDINGS_HEADING, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `CKV")]
    assert rows, f"no findings table under {FINDINGS_HEADING!r}"
    for row in rows:
        check_cell, scans_cell, types_cell, reason = (cell.strip() for cell in row.strip("|").split("|"))
        check_ids = _CHECK_ID.findall(check_cell)
        assert len(check_ids) == 1, row
        scans = [scan.strip().strip("`") for scan in scans_cell.split(",")]
        assert set(scans) <= set(SCANS), row
        types = re.findall(r"`([^`]+)`", types_cell)
        assert types and len(reason.split()) >= 8, row
        for scan in scans:
            for resource_type in types:
                yield scan, check_ids[0], resource_type, reason


def test_every_failing_check_is_documented_with_its_reason(scanned: Scanned) -> None:
    documented = {(scan, check, kind) for scan, check, kind, _ in documented_findings(README.read_text())}
    failing = scanned.failing()
    assert sorted(failing - documented) == [], "failing checks the README does not explain"
    assert sorted(documented - failing) == [], "README rows for checks that pass now: remove them"


def test_the_targets_are_not_among_the_documented_findings() -> None:
    documented = {(scan, check) for scan, check, _, _ in documented_findings(README.read_text())}
    targets: Mapping[str, Sequence[str]] = {
        "CKV_AWS_27": ("stack", "stack+key"),
        "CKV_AWS_158": ("stack+key",),
        "CKV2_K8S_6": ("deploy",),
    }
    for check_id, scans in targets.items():
        for scan in scans:
            assert (scan, check_id) not in documented


def test_the_findings_table_parser_reads_rows_and_refuses_a_malformed_one() -> None:
    table = (
        f"{FINDINGS_HEADING}\n\n| check | scans | resources | why |\n|---|---|---|---|\n"
        "| `CKV_AWS_116` DLQ | stack, stack+key | `AWS::Lambda::Function` | "
        "Step Functions invokes these synchronously, so a DLQ never receives anything |\n\n## Next\n"
    )
    assert [row[:3] for row in documented_findings(table)] == [
        ("stack", "CKV_AWS_116", "AWS::Lambda::Function"),
        ("stack+key", "CKV_AWS_116", "AWS::Lambda::Function"),
    ]
    with pytest.raises(AssertionError):
        list(documented_findings(table.replace("stack, stack+key", "staging")))
