"""docs/deploy.md against the synthesized template: the stack outputs it tells a person to read, and
the functions it says run in the VPC when ``lambdaNetwork`` is set."""

from __future__ import annotations

import re
from pathlib import Path

from tests.infrastructure.conftest import Synthesized

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "deploy.md").read_text()


def rows_after(header: str) -> list[list[str]]:
    lines = GUIDE[GUIDE.index(header) :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_guide_lists_every_stack_output_and_only_those(default_stack: Synthesized) -> None:
    documented = [
        name for row in rows_after("| output | what it is |") for name in re.findall(r"`([^`]+)`", row[0])
    ]
    patterns = {name: re.compile(re.sub(r"<\w+>", "[A-Z][A-Za-z0-9]*", name)) for name in documented}
    outputs = list(default_stack.json["Outputs"])
    for output in outputs:
        assert any(pattern.fullmatch(output) for pattern in patterns.values()), (
            f"{output} is not in the guide"
        )
    for name, pattern in patterns.items():
        assert any(pattern.fullmatch(output) for output in outputs), (
            f"the guide lists {name}, the stack has none"
        )


def test_with_lambda_network_exactly_the_functions_the_guide_names_run_in_the_vpc(
    full_stack: Synthesized,
) -> None:
    ((inside, _),) = rows_after("| in the VPC |")
    prefix = f"{full_stack.config.stack_name}-"
    in_vpc = {
        resource["Properties"]["FunctionName"].removeprefix(prefix)
        for resource in full_stack.resources("AWS::Lambda::Function").values()
        if "VpcConfig" in resource["Properties"]
    }
    assert in_vpc == {name.strip() for name in inside.split(",")}
