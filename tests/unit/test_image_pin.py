"""The release overlay deploy/exporter-release and the step that pins its image (nodeheal/image_pin.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from nodeheal.errors import ConfigurationError
from nodeheal.image_pin import BASE_IMAGE_NAME, COMPONENT_DIR, PinnedImage, main, pin, render_component

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "exporter-release"
DIGEST = "sha256:" + "0123456789abcdef" * 4
ECR = "123456789012.dkr.ecr.us-west-2.amazonaws.com/nodeheal-exporter"


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    """A copy of the committed overlay, without anyone's local pin."""
    copy = tmp_path / "exporter-release"
    shutil.copytree(OVERLAY, copy, ignore=shutil.ignore_patterns(COMPONENT_DIR))
    return copy


@pytest.mark.parametrize(
    ("reference", "repository"),
    [
        (f"{ECR}@{DIGEST}", ECR),
        (f"{ECR}:0.1.0@{DIGEST}", ECR),  # the tag is dropped: the digest decides
        (f"localhost:5000/nodeheal-exporter@{DIGEST}", "localhost:5000/nodeheal-exporter"),
        (f"ghcr.io/acme/gpu/nodeheal-exporter:v1.2.3@{DIGEST}", "ghcr.io/acme/gpu/nodeheal-exporter"),
        (f"acme/nodeheal__exporter@{DIGEST}", "acme/nodeheal__exporter"),
        (f"nodeheal-exporter@{DIGEST}", "nodeheal-exporter"),
    ],
)
def test_a_reference_with_a_digest_is_accepted(reference: str, repository: str) -> None:
    image = PinnedImage.parse(reference)
    assert (image.repository, image.digest) == (repository, DIGEST)
    assert image.reference == f"{repository}@{DIGEST}"


@pytest.mark.parametrize(
    ("reference", "match"),
    [
        ("", "no image given: make pin-image IMAGE="),
        (f"{ECR}:0.1.0", "has no digest: a tag can be moved after review"),
        (f"{ECR}@sha256:{'0' * 63}", "is not a sha256 digest"),
        (f"{ECR}@sha256:{'A' * 64}", "is not a sha256 digest"),
        (f"{ECR}@sha512:{'0' * 128}", "is not a sha256 digest"),
        (f"{ECR}:-bad@{DIGEST}", "is not a valid tag"),
        (f"registry.example.com/NodeHeal-Exporter@{DIGEST}", "is not a valid repository path component"),
        (f"-registry.example.com/nodeheal-exporter@{DIGEST}", "is not a valid registry host"),
        (f"registry.example.com//nodeheal-exporter@{DIGEST}", "is not a valid repository path component"),
    ],
)
def test_anything_else_is_refused_with_the_reason(reference: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        PinnedImage.parse(reference)


def test_the_component_maps_the_base_name_and_the_repository_to_the_digest() -> None:
    component = yaml.safe_load(render_component(PinnedImage.parse(f"{ECR}:0.1.0@{DIGEST}")))
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert component["kind"] == "Component"
    # The second entry serves a base already pointed at the repository (kustomize edit set image).
    assert component["images"] == [
        {"name": BASE_IMAGE_NAME, "newName": ECR, "digest": DIGEST},
        {"name": ECR, "digest": DIGEST},
    ]
    local = yaml.safe_load(render_component(PinnedImage.parse(f"{BASE_IMAGE_NAME}@{DIGEST}")))
    assert local["images"] == [{"name": BASE_IMAGE_NAME, "newName": BASE_IMAGE_NAME, "digest": DIGEST}]


def test_the_base_names_the_image_the_component_rewrites() -> None:
    deployment = yaml.safe_load((ROOT / "deploy" / "exporter" / "deployment.yaml").read_text())
    images = {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert images == {BASE_IMAGE_NAME}
    base = yaml.safe_load((ROOT / "deploy" / "exporter" / "kustomization.yaml").read_text())
    assert [entry["name"] for entry in base["images"]] == [BASE_IMAGE_NAME]


def test_the_committed_overlay_needs_the_pin_and_carries_no_digest() -> None:
    kustomization = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../exporter"]
    assert kustomization["components"] == [COMPONENT_DIR]
    assert "images" not in kustomization
    assert re.search(r"sha256:[0-9a-f]{64}", (OVERLAY / "kustomization.yaml").read_text()) is None
    # The pin is written at release time and never committed.
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"deploy/exporter-release/{COMPONENT_DIR}/" in ignored


def test_pin_writes_the_component_into_the_overlay(overlay: Path) -> None:
    written = pin(PinnedImage.parse(f"{ECR}@{DIGEST}"), overlay)
    assert written == overlay / COMPONENT_DIR / "kustomization.yaml"
    assert yaml.safe_load(written.read_text())["images"][0] == {
        "name": BASE_IMAGE_NAME,
        "newName": ECR,
        "digest": DIGEST,
    }
    # A second release replaces the first pin.
    other = "sha256:" + "f" * 64
    pin(PinnedImage.parse(f"{ECR}@{other}"), overlay)
    assert {e["digest"] for e in yaml.safe_load(written.read_text())["images"]} == {other}


def test_pin_refuses_a_directory_that_is_not_the_release_overlay(tmp_path: Path, overlay: Path) -> None:
    image = PinnedImage.parse(f"{ECR}@{DIGEST}")
    with pytest.raises(ConfigurationError, match="is not a kustomize overlay"):
        pin(image, tmp_path / "nowhere")
    (overlay / "kustomization.yaml").write_text("resources:\n  - ../exporter\n")
    with pytest.raises(ConfigurationError, match=f"does not list the component {COMPONENT_DIR}"):
        pin(image, overlay)
    assert not (overlay / COMPONENT_DIR).exists()


def test_main_pins_and_says_how_to_apply(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"{ECR}:0.1.0@{DIGEST}", "--overlay", str(overlay)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"pinned {ECR}@{DIGEST} in {overlay / COMPONENT_DIR / 'kustomization.yaml'}")
    assert f"kubectl apply -k {overlay}" in out


def test_main_refuses_a_tag_with_exit_2_and_writes_nothing(
    overlay: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([f"{ECR}:0.1.0", "--overlay", str(overlay)]) == 2
    assert capsys.readouterr().err.startswith(f"error: '{ECR}:0.1.0' has no digest")
    assert not (overlay / COMPONENT_DIR).exists()
