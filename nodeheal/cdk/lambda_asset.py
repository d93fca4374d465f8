"""The one code asset every NodeHeal Lambda runs: ``lambdas/``, what it imports of ``nodeheal/``, the wheels.

Packaging needs neither Docker nor, once the wheels are there, the network:

1. ``python -m nodeheal.cdk.lambda_asset download`` (``make lambda-deps`` in the checkout) fetches
   the wheels listed in ``lambdas/requirements.txt`` for the Lambda platform into the wheelhouse.
2. ``cdk synth`` bundles locally (:class:`WheelhouseBundling`): ``pip install --no-index`` from that
   wheelhouse into the asset directory, then copies the handlers and the modules of ``nodeheal/``
   they import, directly or not (nodeheal.cdk.import_closure): not the CDK code, the simulation,
   the fake API server nor the command line, which no function runs.

Where the sources and the wheelhouse are depends on how NodeHeal is installed:

* the source checkout: ``lambdas/`` and ``build/wheelhouse/`` next to ``nodeheal/``; a missing or
  stale wheelhouse is an error that names ``make lambda-deps``.
* an installed distribution (``pip install 'nodeheal[cdk]'``, for another CDK app): the wheel
  carries the handlers as ``nodeheal/cdk/lambda_handlers/`` (setup.py puts them there), and the
  wheelhouse is a per-user cache the first synth fills with ``pip download`` (a CDK app's synth
  fetches its bundling dependencies the same way), offline from then on.

``NODEHEAL_WHEELHOUSE`` or the construct's ``lambda_wheelhouse`` names a wheelhouse instead (a CI
cache, a shared download directory); one named like that must already hold the wheels. The bundler
never hands over to Docker. Tests skip bundling altogether with the ``aws:cdk:bundling-stacks``
context.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from nodeheal import __version__ as nodeheal_version
from nodeheal.aws.service_models import MODELS_DIRECTORY, write_trimmed_models
from nodeheal.cdk.bytecode import BytecodeError, BytecodeResult, Compiler, ship_bytecode
from nodeheal.cdk.import_closure import (
    ImportClosureError,
    SourceModule,
    import_closure,
    package_modules,
    shipped_files,
)
from nodeheal.cdk.synth_summary import directory_size

#: This package: the CDK code that builds the asset, never imported by a function (nor importable
#: there: the asset has no aws_cdk).
CDK_PACKAGE = Path(__file__).resolve().parent
NODEHEAL_PACKAGE = CDK_PACKAGE.parent
#: The source checkout's root, when NodeHeal runs from one.
ROOT = NODEHEAL_PACKAGE.parent
#: Where an installed distribution carries the handlers (``lambdas/`` of the checkout, with their
#: requirements.txt): setup.py copies them there when it builds the wheel.
PACKAGED_HANDLERS = CDK_PACKAGE / "lambda_handlers"
#: An installed distribution has the packaged handlers; the checkout never does (setup.py writes
#: them into the build directory only).
INSTALLED = (PACKAGED_HANDLERS / "requirements.txt").is_file()
HANDLERS = PACKAGED_HANDLERS if INSTALLED else ROOT / "lambdas"
REQUIREMENTS = HANDLERS / "requirements.txt"
#: A wheelhouse named by the user; it must already hold the wheels.
NAMED_WHEELHOUSE = os.environ.get("NODEHEAL_WHEELHOUSE")
#: Per user and per NodeHeal version: another version may need other wheels.
CACHE_WHEELHOUSE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "nodeheal"
    / f"lambda-wheelhouse-{nodeheal_version}"
    if INSTALLED
    else None
)
WHEELHOUSE = Path(NAMED_WHEELHOUSE or CACHE_WHEELHOUSE or ROOT / "build" / "wheelhouse")
#: Only the per-user cache is filled on demand: a named wheelhouse or the checkout's is prepared on
#: purpose, and synthesizing must not reach the network behind the back of whoever prepared it.
DOWNLOADS_MISSING_WHEELS = WHEELHOUSE == CACHE_WHEELHOUSE
#: Source packages copied into the asset next to the installed wheels: asset directory -> source.
SOURCE_DIRECTORIES: dict[str, Path] = {"nodeheal": NODEHEAL_PACKAGE, "lambdas": HANDLERS}
SOURCE_PACKAGES = tuple(SOURCE_DIRECTORIES)
#: The package of the handlers, shipped whole; the other source packages ship what it imports.
HANDLER_PACKAGE = "lambdas"
CDK_MODULE = f"{NODEHEAL_PACKAGE.name}.{CDK_PACKAGE.name}"
#: Copy of the requirements the wheelhouse was downloaded for; a mismatch means it is stale.
WHEELHOUSE_STAMP = "requirements.txt"

#: The Lambda platform the wheels must match: the python3.12 runtime on x86_64.
PYTHON_VERSION = "3.12"
PLATFORM_ARGS: tuple[str, ...] = (
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--python-version",
    PYTHON_VERSION,
    "--implementation",
    "cp",
)
#: BundlingOptions requires an image; Docker never runs it because WheelhouseBundling either
#: bundles or raises (returning False would hand the job to Docker).
BUNDLING_IMAGE = "public.ecr.aws/sam/build-python3.12"

#: Installed paths removed from the asset: ``bin`` holds console scripts whose shebangs name the
#: build machine's interpreter.
PRUNED_PATHS: tuple[str, ...] = ("bin",)


class LambdaAssetError(RuntimeError):
    """The asset cannot be built (no wheelhouse, stale wheelhouse, pip failed)."""


def download(
    wheelhouse: Path = WHEELHOUSE, requirements: Path = REQUIREMENTS, *, force: bool = False
) -> bool:
    """Fetch the wheels for the Lambda platform into ``wheelhouse`` (needs the package index once).

    Returns False without touching the network when the wheelhouse already matches the
    requirements, so ``make synth`` (which runs this first) stays offline after the first run.
    """
    if not force and wheelhouse_is_current(wheelhouse, requirements):
        return False
    wheelhouse.mkdir(parents=True, exist_ok=True)
    _pip("download", *PLATFORM_ARGS, "--dest", str(wheelhouse), "--requirement", str(requirements))
    shutil.copyfile(requirements, wheelhouse / WHEELHOUSE_STAMP)
    return True


def wheelhouse_is_current(wheelhouse: Path = WHEELHOUSE, requirements: Path = REQUIREMENTS) -> bool:
    try:
        check_wheelhouse(wheelhouse, requirements)
    except LambdaAssetError:
        return False
    return True


def check_wheelhouse(wheelhouse: Path = WHEELHOUSE, requirements: Path = REQUIREMENTS) -> None:
    """Raise LambdaAssetError unless ``wheelhouse`` was downloaded for the current requirements."""
    stamp = wheelhouse / WHEELHOUSE_STAMP
    if not stamp.is_file() or not any(wheelhouse.glob("*.whl")):
        raise LambdaAssetError(
            f"the Lambda wheelhouse {wheelhouse} is missing; run {_download_command(wheelhouse)} once "
            "(it downloads the wheels of lambdas/requirements.txt), then synthesize again"
        )
    if _requirement_lines(stamp.read_text()) != _requirement_lines(requirements.read_text()):
        raise LambdaAssetError(
            f"{requirements} changed since the wheelhouse {wheelhouse} was downloaded; "
            f"run {_download_command(wheelhouse)} again"
        )


def _download_command(wheelhouse: Path) -> str:
    # The Makefile fills the same wheelhouse (NODEHEAL_WHEELHOUSE or build/wheelhouse).
    if not INSTALLED and wheelhouse == WHEELHOUSE:
        return "`make lambda-deps`"
    return f"`python -m nodeheal.cdk.lambda_asset download --wheelhouse {wheelhouse}`"


def _requirement_lines(text: str) -> list[str]:
    """The requirements without comments and blank lines: a reworded comment needs no new wheels."""
    lines = (raw.split("#", 1)[0].strip() for raw in text.splitlines())
    return [line for line in lines if line]


def shipped_modules(
    sources: Mapping[str, Path] = SOURCE_DIRECTORIES, handlers: str = HANDLER_PACKAGE
) -> dict[str, SourceModule]:
    """The source modules the asset carries: the handlers' package whole, and of the others what
    the handlers import (nodeheal.cdk.import_closure), so no function ships the simulation, the
    fake API server or the command line. Importing this package (the CDK code) is an error."""
    modules = import_closure(package_modules(handlers, sources[handlers]), sources)
    cdk_modules = sorted(name for name in modules if name.startswith(f"{CDK_MODULE}."))
    if CDK_MODULE in modules or cdk_modules:
        raise LambdaAssetError(
            f"a Lambda handler imports {', '.join(cdk_modules) or CDK_MODULE}, the CDK code, "
            "which the asset does not carry (it has no aws_cdk)"
        )
    return modules


def shipped_sources(
    sources: Mapping[str, Path] = SOURCE_DIRECTORIES, handlers: str = HANDLER_PACKAGE
) -> dict[Path, Path]:
    """Path in the asset -> source file, for :func:`shipped_modules` and their packages' data."""
    try:
        files = shipped_files(shipped_modules(sources, handlers).values(), sources)
    except ImportClosureError as exc:
        raise LambdaAssetError(str(exc)) from exc
    # The handlers' requirements are the wheels, installed already.
    files.pop(Path(handlers) / REQUIREMENTS.name, None)
    return files


def build(
    output_dir: Path,
    wheelhouse: Path = WHEELHOUSE,
    requirements: Path = REQUIREMENTS,
    *,
    compiler: Compiler | None = None,
) -> BytecodeResult:
    """Install the wheels offline into ``output_dir``, copy the source packages next to them, and
    compile the lot for the runtime's Python when this machine has one (nodeheal.cdk.bytecode).

    ``compiler``: compile with this interpreter instead of looking for the runtime's version (the
    cold-start benchmark runs the asset on the interpreter it measures with).
    """
    check_wheelhouse(wheelhouse, requirements)
    _pip(
        "install",
        *PLATFORM_ARGS,
        "--no-index",
        "--find-links",
        str(wheelhouse),
        "--target",
        str(output_dir),
        # Compiled .pyc files would target the build machine's Python, not the runtime's.
        "--no-compile",
        "--requirement",
        str(requirements),
    )
    for pruned in PRUNED_PATHS:
        shutil.rmtree(output_dir / pruned, ignore_errors=True)
    for destination, source in shipped_sources().items():
        (output_dir / destination).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, output_dir / destination)
    # The EC2 client of terminate and reboot is built from a model of the three operations they
    # call (nodeheal.aws.service_models), found next to the nodeheal package by the runtime.
    write_trimmed_models(output_dir / MODELS_DIRECTORY)
    try:
        return ship_bytecode(output_dir, PYTHON_VERSION, compiler)
    except BytecodeError as exc:
        raise LambdaAssetError(str(exc)) from exc


@jsii.implements(ILocalBundling)
class WheelhouseBundling:
    """CDK local bundling from the wheelhouse; raises instead of returning False (= use Docker).

    ``download_missing``: fill a missing or stale wheelhouse first (needs the package index).
    """

    def __init__(
        self,
        wheelhouse: Path = WHEELHOUSE,
        requirements: Path = REQUIREMENTS,
        *,
        download_missing: bool = False,
    ) -> None:
        self._wheelhouse = wheelhouse
        self._requirements = requirements
        self._download_missing = download_missing

    # jsii passes the BundlingOptions struct positionally while the typed stub declares keywords;
    # neither is needed, the wheelhouse and requirements are fixed at construction.
    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        if self._download_missing:
            download(self._wheelhouse, self._requirements)
        result = build(Path(output_dir), self._wheelhouse, self._requirements)
        if result.skipped_because:
            # Not an error (the asset works), but every cold start pays for it: say so once.
            print(f"NodeHeal Lambda asset: no bytecode: {result.skipped_because}", file=sys.stderr)
        return True


def lambda_code(wheelhouse: Path | None = None) -> lambda_.AssetCode:
    """The shared asset; binding it to several functions of one stack uploads it once.

    ``wheelhouse`` None: :data:`WHEELHOUSE`, filled on demand when it is the per-user cache.
    """
    bundling = (
        WheelhouseBundling(WHEELHOUSE, download_missing=DOWNLOADS_MISSING_WHEELS)
        if wheelhouse is None
        else WheelhouseBundling(wheelhouse)
    )
    return lambda_.Code.from_asset(
        # The source directory only anchors the asset: the bundler reads the packages itself, and the
        # OUTPUT hash means CDK never fingerprints the source (nor anything when bundling is skipped).
        str(HANDLERS),
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(image=DockerImage.from_registry(BUNDLING_IMAGE), local=bundling),
    )


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--quiet"]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise LambdaAssetError(f"`pip {args[0]}` failed ({result.returncode}):\n{result.stderr.strip()}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeheal.cdk.lambda_asset", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    download_parser = commands.add_parser("download", help="fetch the Lambda wheels into the wheelhouse")
    download_parser.add_argument("--force", action="store_true", help="download even if up to date")
    build_parser = commands.add_parser("build", help="build the asset into a directory and print its size")
    build_parser.add_argument("output_dir", type=Path)
    for command in (download_parser, build_parser):
        command.add_argument(
            "--wheelhouse", type=Path, default=WHEELHOUSE, help=f"the wheelhouse (default: {WHEELHOUSE})"
        )
    args = parser.parse_args(argv)
    wheelhouse: Path = args.wheelhouse
    try:
        if args.command == "download":
            fetched = download(wheelhouse, force=args.force)
            wheels = sorted(path.name for path in wheelhouse.glob("*.whl"))
            print(f"{len(wheels)} wheels in {wheelhouse}" + ("" if fetched else " (up to date)"))
        else:
            result = build(args.output_dir, wheelhouse)
            size = directory_size(args.output_dir)
            compiled = (
                f"bytecode for Python {result.compiler.version_text} ({result.compiled_files} modules)"
                if result.compiler
                else f"no bytecode: {result.skipped_because}"
            )
            print(f"asset {args.output_dir}: {size / 1_000_000:.1f} MB unzipped; {compiled}")
    except LambdaAssetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
