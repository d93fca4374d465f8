"""The release step that pins the exporter image by digest: ``make pin-image IMAGE=<repo>@sha256:<hex>``.

``deploy/exporter-release`` is a kustomize overlay of ``deploy/exporter`` whose image comes from the
component ``pinned-image/``, which this module writes and nobody commits: a digest in the
repository would name no image anyone built, and a tag can be moved to other bits after review.
Until the component exists the overlay does not build, so the release manifests cannot be applied
with an unpinned image.

The component rewrites the base's image name (``nodeheal-exporter``) to the repository with the
digest, and also the repository itself, for a base already pointed at it with
``kustomize edit set image``. Kustomize replaces a tag with the digest, so the Deployment names the
image by digest alone.

Obtain the digest from the push: ``docker buildx build --push --metadata-file meta.json`` (field
``containerimage.digest``), ``docker inspect --format '{{index .RepoDigests 0}}' IMAGE`` after a
push, or ``aws ecr describe-images --repository-name R --image-ids imageTag=T``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeheal.errors import ConfigurationError

#: The image name deploy/exporter/deployment.yaml uses; the base's ``images`` entry matches it.
BASE_IMAGE_NAME = "nodeheal-exporter"
DEFAULT_OVERLAY = Path("deploy/exporter-release")
COMPONENT_DIR = "pinned-image"

# The reference grammar of the OCI distribution project (distribution/reference, regexp.go): a
# repository is an optional registry host and path components; only sha256 digests are accepted.
_HOST_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = re.compile(rf"^{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*(?::[0-9]+)?$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class PinnedImage:
    repository: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"

    @classmethod
    def parse(cls, reference: str) -> PinnedImage:
        """``<repository>[:<tag>]@sha256:<64 hex>``; a tag is accepted and dropped (the digest wins)."""
        example = "123456789012.dkr.ecr.us-west-2.amazonaws.com/nodeheal-exporter@sha256:<64 hex digits>"
        if not reference.strip():
            raise ConfigurationError(f"no image given: make pin-image IMAGE={example}")
        name, at, digest = reference.strip().partition("@")
        if not at:
            raise ConfigurationError(
                f"{reference!r} has no digest: a tag can be moved after review, a digest cannot. "
                f"Give {example}"
            )
        if not _DIGEST.match(digest):
            raise ConfigurationError(
                f"{digest!r} is not a sha256 digest (sha256: and 64 lowercase hex digits) in {reference!r}"
            )
        return cls(repository=_repository(name, reference), digest=digest)


def _repository(name: str, reference: str) -> str:
    parts = name.split("/")
    # A tag follows the last path component; a registry port sits in the first one.
    last, colon, tag = parts[-1].partition(":")
    if colon and not _TAG.match(tag):
        raise ConfigurationError(f"{tag!r} is not a valid tag in {reference!r}")
    parts[-1] = last
    first = parts[0]
    has_registry = len(parts) > 1 and ("." in first or ":" in first or first == "localhost")
    if has_registry and not _REGISTRY.match(first):
        raise ConfigurationError(f"{first!r} is not a valid registry host in {reference!r}")
    path = parts[1:] if has_registry else parts
    bad = [part for part in path if not _PATH_COMPONENT.match(part)]
    if bad:
        raise ConfigurationError(
            f"{bad[0]!r} is not a valid repository path component in {reference!r} "
            "(lowercase letters and digits, separated by '.', '_', '__' or '-')"
        )
    return "/".join(parts)


def render_component(image: PinnedImage) -> str:
    """The ``pinned-image/kustomization.yaml`` component for ``image``."""
    entries = [f"  - name: {BASE_IMAGE_NAME}\n    newName: {image.repository}\n    digest: {image.digest}\n"]
    if image.repository != BASE_IMAGE_NAME:
        entries.append(f"  - name: {image.repository}\n    digest: {image.digest}\n")
    return (
        f"# Written by `make pin-image` for {image.reference}; not committed (nodeheal/image_pin.py).\n"
        "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
        "kind: Component\n"
        "images:\n" + "".join(entries)
    )


def pin(image: PinnedImage, overlay: Path) -> Path:
    """Write the component into ``overlay`` (which must be the release overlay) and return its path."""
    kustomization = overlay / "kustomization.yaml"
    if not kustomization.is_file():
        raise ConfigurationError(f"{overlay} is not a kustomize overlay: {kustomization} does not exist")
    if f"- {COMPONENT_DIR}" not in kustomization.read_text(encoding="utf-8"):
        raise ConfigurationError(f"{kustomization} does not list the component {COMPONENT_DIR}")
    target = overlay / COMPONENT_DIR / "kustomization.yaml"
    target.parent.mkdir(exist_ok=True)
    target.write_text(render_component(image), encoding="utf-8")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeheal.image_pin",
        description="Pin the exporter image of the release overlay by digest (the release step).",
    )
    parser.add_argument("image", help="<repository>[:<tag>]@sha256:<64 hex digits>, as pushed")
    parser.add_argument(
        "--overlay", type=Path, default=DEFAULT_OVERLAY, help=f"release overlay (default: {DEFAULT_OVERLAY})"
    )
    args = parser.parse_args(argv)
    try:
        image = PinnedImage.parse(args.image)
        written = pin(image, args.overlay)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"pinned {image.reference} in {written}; apply with: kubectl apply -k {args.overlay}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
