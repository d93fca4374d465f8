"""What ``make synth`` prints: a short summary of the cloud assembly ``cdk synth`` wrote.

``cdk synth`` without ``--quiet`` prints the whole template as YAML (thousands of lines) that
nobody reads in a terminal; ``make synth`` writes it to ``cdk.out/`` only and prints this instead:
each stack with its template file and its resources counted by type, the Lambda code asset with
its unzipped size and its bytecode, where cdk's own messages went, and the command that deploys.

The cloud assembly's layout is CDK's cloud-assembly-schema (aws/aws-cdk,
packages/@aws-cdk/cloud-assembly-schema): ``manifest.json`` lists artifacts; a
``aws:cloudformation:stack`` artifact names its ``templateFile`` (relative to the assembly) and
optionally ``stackName`` (default: the artifact id); a ``cdk:asset-manifest`` artifact names the
assets file, whose ``files`` entries give each asset's ``source.path`` and ``packaging``
(``zip`` for a directory CDK zips when it publishes) and the S3 ``objectKey`` the template
refers to.

Nothing here imports the CDK: it reads files, in well under a second.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STACK_ARTIFACT = "aws:cloudformation:stack"
ASSET_MANIFEST_ARTIFACT = "cdk:asset-manifest"
#: Lambda's limit on a function's unzipped code (deployment package and layers), in bytes
#: (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
LAMBDA_UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024
#: The summary's lines, all told: with the set-up and synth lines before it, ``make synth`` stays
#: within 20 lines even on a fresh clone.
MAX_SUMMARY_LINES = 14
WIDTH = 100


class AssemblyError(Exception):
    """The directory is not a cloud assembly this summary can read."""


@dataclass(frozen=True, slots=True)
class CodeAsset:
    path: Path
    size_bytes: int
    #: How many of the stack's Lambda functions run this code.
    functions: int
    #: The interpreter tag of the asset's bytecode (``cpython-312``), "" when it ships sources only
    #: (nodeheal.cdk.bytecode: each cold start then compiles the modules it imports).
    bytecode_tag: str = ""
    bytecode_modules: int = 0


@dataclass(frozen=True, slots=True)
class StackSummary:
    name: str
    template: Path
    template_bytes: int
    resource_types: Mapping[str, int]
    code_assets: tuple[CodeAsset, ...]

    @property
    def resources(self) -> int:
        return sum(self.resource_types.values())


def directory_size(path: Path) -> int:
    """Bytes of every file under ``path``: the unzipped size Lambda's 250 MB limit applies to."""
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AssemblyError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise AssemblyError(f"{path} is not valid JSON: {exc}") from None


def read_assembly(assembly: Path) -> list[StackSummary]:
    """Every stack of the cloud assembly in ``assembly`` (``cdk.out``), in manifest order."""
    manifest_path = assembly / "manifest.json"
    if not manifest_path.is_file():
        raise AssemblyError(f"{assembly} has no manifest.json: it is not a cloud assembly (run `make synth`)")
    artifacts: Mapping[str, Any] = _read_json(manifest_path).get("artifacts") or {}
    stacks = []
    for artifact_id, artifact in artifacts.items():
        if artifact.get("type") != STACK_ARTIFACT:
            continue
        properties = artifact.get("properties") or {}
        template_path = assembly / properties["templateFile"]
        template = _read_json(template_path)
        resources: Mapping[str, Any] = template.get("Resources") or {}
        types = Counter(str(resource.get("Type", "?")) for resource in resources.values())
        assets = _code_assets(assembly, artifacts, artifact.get("dependencies") or [], resources)
        stacks.append(
            StackSummary(
                name=str(properties.get("stackName") or artifact_id),
                template=template_path,
                template_bytes=template_path.stat().st_size,
                resource_types=dict(types),
                code_assets=tuple(assets),
            )
        )
    if not stacks:
        raise AssemblyError(f"{manifest_path} lists no CloudFormation stack")
    return stacks


def _code_assets(
    assembly: Path, artifacts: Mapping[str, Any], dependencies: Sequence[str], resources: Mapping[str, Any]
) -> list[CodeAsset]:
    """The zipped directory assets of the stack's asset manifest, with the functions that use each."""
    keys = Counter(
        str((resource.get("Properties") or {}).get("Code", {}).get("S3Key", ""))
        for resource in resources.values()
        if resource.get("Type") == "AWS::Lambda::Function"
    )
    found = []
    for dependency in dependencies:
        artifact = artifacts.get(dependency) or {}
        if artifact.get("type") != ASSET_MANIFEST_ARTIFACT:
            continue
        files: Mapping[str, Any] = _read_json(assembly / artifact["properties"]["file"]).get("files") or {}
        for entry in files.values():
            source = entry.get("source") or {}
            path = assembly / str(source.get("path", ""))
            if source.get("packaging") != "zip" or not path.is_dir():
                continue
            object_keys = {str(d.get("objectKey")) for d in (entry.get("destinations") or {}).values()}
            found.append(
                CodeAsset(
                    path=path,
                    size_bytes=directory_size(path),
                    functions=sum(keys[key] for key in object_keys),
                    **_bytecode(path),
                )
            )
    return found


def _bytecode(path: Path) -> dict[str, Any]:
    """The interpreter tag most of the asset's pycs carry, and how many carry it."""
    tags = Counter(pyc.name.rsplit(".", 2)[-2] for pyc in path.rglob("__pycache__/*.pyc"))
    if not tags:
        return {}
    tag, count = tags.most_common(1)[0]
    return {"bytecode_tag": tag, "bytecode_modules": count}


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


#: Joins the words of one count (``14 Role``) so that wrapping never splits it; a space once wrapped.
_UNBREAKABLE = "\u00a0"


def _type_counts(types: Mapping[str, int]) -> str:
    """``IAM 14 Role, 14 Policy; Lambda 12 Function, ...``: by service, most resources first."""
    services: dict[str, Counter[str]] = {}
    for resource_type, count in types.items():
        _, service, kind = ([*resource_type.split("::", 2), "", ""])[:3]
        services.setdefault(service or resource_type, Counter())[kind or resource_type] = count
    ordered = sorted(services.items(), key=lambda item: (-item[1].total(), item[0]))
    return "; ".join(
        f"{service}{_UNBREAKABLE}"
        + ", ".join(f"{count}{_UNBREAKABLE}{kind}" for kind, count in sorted(kinds.items(), key=_by_count))
        for service, kinds in ordered
    )


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def summary_lines(stacks: Sequence[StackSummary], *, log: Path | None = None) -> list[str]:
    """The summary, at most :data:`MAX_SUMMARY_LINES` lines of at most :data:`WIDTH` characters
    (a path longer than that is never cut)."""
    lines: list[str] = []
    for stack in stacks:
        lines.append(
            f"stack {stack.name}: {stack.template} "
            f"({stack.resources} resources, {stack.template_bytes / 1000:.0f} KB)"
        )
        wrapped = textwrap.wrap(
            _type_counts(stack.resource_types),
            width=WIDTH,
            initial_indent="  ",
            subsequent_indent="  ",
            break_on_hyphens=False,
        )
        lines.extend(line.replace(_UNBREAKABLE, " ") for line in wrapped)
        for asset in stack.code_assets:
            share = asset.size_bytes / LAMBDA_UNZIPPED_LIMIT_BYTES
            lines.append(
                f"Lambda code: {asset.path}/ {_megabytes(asset.size_bytes)} unzipped "
                f"({share:.0%} of Lambda's 250 MB), shared by {_plural(asset.functions, 'function')}"
            )
            lines.append(
                f"Lambda bytecode: {asset.bytecode_tag}, {asset.bytecode_modules} modules"
                if asset.bytecode_tag
                else "Lambda bytecode: none, each cold start compiles the modules (no Python 3.12 here)"
            )
    if log is not None and log.is_file():
        messages = log.read_text(encoding="utf-8", errors="replace").splitlines()
        warnings = sum(1 for line in messages if "warning" in line.lower())
        lines.append(
            f"cdk's own messages ({_plural(len(messages), 'line')}, {_plural(warnings, 'warning')}): {log}"
        )
    lines.append(f"deploy: npx cdk deploy {' '.join(stack.name for stack in stacks)}")
    if len(lines) > MAX_SUMMARY_LINES:
        # Many stacks or many kinds of resource: the counts give way, the paths and the deploy stay.
        kept = [line for line in lines if not line.startswith("  ")]
        lines = kept[:MAX_SUMMARY_LINES]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeheal.cdk.synth_summary",
        description="Summarize the cloud assembly `cdk synth` wrote (what `make synth` prints).",
    )
    parser.add_argument("assembly", type=Path, help="the cloud assembly directory (cdk.out)")
    parser.add_argument("--log", type=Path, help="where cdk's own output went, to point at it")
    args = parser.parse_args(argv)
    try:
        stacks = read_assembly(args.assembly)
    except AssemblyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary_lines(stacks, log=args.log)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
