"""What ``make synth`` prints after ``cdk synth --quiet``: a summary of the cloud assembly, short
whatever the stack holds. The real ``make synth`` is run by tests/infrastructure/test_cli.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodeheal.cdk.synth_summary import (
    MAX_SUMMARY_LINES,
    WIDTH,
    AssemblyError,
    main,
    read_assembly,
    summary_lines,
)

ASSET_HASH = "4567fdfeb0e7fc01687227651055a50164abfbca454c9640f0730328bece3642"


def function(key: str) -> dict[str, Any]:
    return {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Code": {"S3Bucket": {"Fn::Sub": "cdk-assets"}, "S3Key": key}},
    }


def write_assembly(directory: Path, resources: dict[str, Any], *, asset_bytes: int = 3_000_000) -> Path:
    """A cloud assembly shaped as `cdk synth` writes it: manifest, template, asset manifest, asset."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "NodeHeal.template.json").write_text(json.dumps({"Resources": resources}))
    asset = directory / f"asset.{ASSET_HASH}"
    (asset / "nodeheal").mkdir(parents=True)
    (asset / "nodeheal" / "__init__.py").write_bytes(b"x" * (asset_bytes - 1000))
    (asset / "handler.py").write_bytes(b"y" * 1000)
    files = {
        ASSET_HASH: {
            "source": {"path": f"asset.{ASSET_HASH}", "packaging": "zip"},
            "destinations": {"current": {"objectKey": f"{ASSET_HASH}.zip"}},
        },
        "template": {
            "source": {"path": "NodeHeal.template.json", "packaging": "file"},
            "destinations": {"current": {"objectKey": "template.json"}},
        },
    }
    (directory / "NodeHeal.assets.json").write_text(json.dumps({"files": files}))
    manifest = {
        "artifacts": {
            "NodeHeal.assets": {"type": "cdk:asset-manifest", "properties": {"file": "NodeHeal.assets.json"}},
            "NodeHeal": {
                "type": "aws:cloudformation:stack",
                "properties": {"templateFile": "NodeHeal.template.json"},
                "dependencies": ["NodeHeal.assets"],
            },
            "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
        }
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def nodeheal_like_resources() -> dict[str, Any]:
    resources: dict[str, Any] = {f"Fn{i}": function(f"{ASSET_HASH}.zip") for i in range(3)}
    resources["Helper"] = function("other.zip")  # a function of another asset is not counted
    resources.update({f"Role{i}": {"Type": "AWS::IAM::Role"} for i in range(4)})
    resources["Table"] = {"Type": "AWS::DynamoDB::Table"}
    resources["Machine"] = {"Type": "AWS::StepFunctions::StateMachine"}
    return resources


def test_the_summary_names_the_stack_the_template_the_counts_and_the_code(tmp_path: Path) -> None:
    assembly = write_assembly(tmp_path / "cdk.out", nodeheal_like_resources())
    log = tmp_path / "cdk-synth.log"
    log.write_text("Bundling asset NodeHeal/...\n[WARNING] a property is deprecated\n")

    lines = summary_lines(read_assembly(assembly), log=log)

    assert lines[0].startswith(f"stack NodeHeal: {assembly / 'NodeHeal.template.json'} (10 resources, ")
    assert lines[1] == "  IAM 4 Role; Lambda 4 Function; DynamoDB 1 Table; StepFunctions 1 StateMachine"
    assert lines[2] == (
        f"Lambda code: {assembly / f'asset.{ASSET_HASH}'}/ 3.0 MB unzipped (1% of Lambda's 250 MB), "
        "shared by 3 functions"
    )
    assert lines[3] == "Lambda bytecode: none, each cold start compiles the modules (no Python 3.12 here)"
    assert lines[4] == f"cdk's own messages (2 lines, 1 warning): {log}"
    assert lines[5] == "deploy: npx cdk deploy NodeHeal"
    assert len(lines) == 6


def test_the_summary_names_the_bytecode_the_asset_ships(tmp_path: Path) -> None:
    assembly = write_assembly(tmp_path / "cdk.out", nodeheal_like_resources())
    cache = assembly / f"asset.{ASSET_HASH}" / "nodeheal" / "__pycache__"
    cache.mkdir(parents=True)
    for name in ("config", "runtime"):
        (cache / f"{name}.cpython-312.pyc").write_bytes(b"")
    (cache / "stray.cpython-311.pyc").write_bytes(b"")
    lines = summary_lines(read_assembly(assembly))
    assert lines[3] == "Lambda bytecode: cpython-312, 2 modules"


def test_many_kinds_of_resource_wrap_and_never_split_a_count(tmp_path: Path) -> None:
    resources = {f"R{i}": {"Type": f"AWS::Service{i % 7}::Kind{i}"} for i in range(40)}
    lines = summary_lines(read_assembly(write_assembly(tmp_path / "cdk.out", resources)))
    counts = [line for line in lines if line.startswith("  ")]
    assert len(counts) > 1
    assert all(len(line) <= WIDTH for line in counts)
    for line in counts:  # each line starts with a whole count (or a service and its first count)
        assert re.match(r"  (Service\d+ )?\d+ Kind\d+", line), line
        assert not re.search(r" \d+$|Service\d+$", line), line
    assert sum(line.count(" Kind") for line in counts) == 40


def test_the_summary_stays_short_whatever_the_stack_holds(tmp_path: Path) -> None:
    resources = {f"R{i}": {"Type": f"AWS::Service{i}::AVeryLongResourceKindName{i}"} for i in range(400)}
    lines = summary_lines(read_assembly(write_assembly(tmp_path / "cdk.out", resources)))
    assert len(lines) <= MAX_SUMMARY_LINES
    # What a person acts on stays: the template, the code asset and the deploy command.
    assert lines[0].startswith("stack NodeHeal: ")
    assert any(line.startswith("Lambda code: ") for line in lines)
    assert lines[-1] == "deploy: npx cdk deploy NodeHeal"


def test_main_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assembly = write_assembly(tmp_path / "cdk.out", nodeheal_like_resources())
    assert main([str(assembly)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("stack NodeHeal: ")
    assert out[-1] == "deploy: npx cdk deploy NodeHeal"


def test_a_directory_that_is_not_an_assembly_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"error: {tmp_path} has no manifest.json: it is not a cloud assembly (run `make synth`)\n"
    )


def test_an_assembly_without_a_stack_is_refused(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {"Tree": {"type": "cdk:tree"}}}))
    with pytest.raises(AssemblyError, match="lists no CloudFormation stack"):
        read_assembly(tmp_path)


def test_a_broken_template_is_named(tmp_path: Path) -> None:
    assembly = write_assembly(tmp_path / "cdk.out", nodeheal_like_resources())
    (assembly / "NodeHeal.template.json").write_text("{not json")
    with pytest.raises(AssemblyError, match=r"NodeHeal.template.json is not valid JSON"):
        read_assembly(assembly)
