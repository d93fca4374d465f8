"""Every command the README and the docs show that can run offline is run here, so no claim there
is contradicted by a command.

A fenced block is marked on the line before it: ``<!-- runnable -->`` (each command in it exits 0
here, offline), ``<!-- runnable: exit N -->`` (each exits N: a refusal the docs show on purpose),
or ``<!-- not runnable: REASON -->`` (it needs an AWS account, a cluster, or is the test suite
itself). A block that shows a ``nodeheal`` or ``make`` command must carry one of the marks, so a
new command in the docs cannot go untested unnoticed. In a ``console`` block the commands are the
lines after ``$ ``; in a ``bash`` block every line that is not a comment (a trailing ``\\`` joins
lines).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("examples/**/*.md"),
        *ROOT.glob("deploy/**/*.md"),
    }
)
MARK = re.compile(r"^<!-- (runnable(?:: exit (?P<code>\d+))?|not runnable: (?P<reason>.+\S)) -->$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)")
COMMANDS = re.compile(r"(^|[\s;&|(])(nodeheal|make)\s")
#: A command runs at most this long: the slowest synthesizes the stack for a pattern test.
COMMAND_TIMEOUT = 240


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    body: list[str]
    mark: str  # "runnable", "not runnable" or "" (none)
    exit_code: int = 0
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        if self.language == "console":
            return [line.strip()[2:] for line in self.body if line.strip().startswith("$ ")]
        joined: list[str] = []
        pending = ""
        for raw in self.body:
            line = raw.strip()
            if not pending and (not line or line.startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            joined.append(pending + line)
            pending = ""
        return joined


def blocks(document: Path) -> list[Block]:
    found: list[Block] = []
    lines = document.read_text(encoding="utf-8").splitlines()
    index = 0
    previous = ""
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            if lines[index].strip():
                previous = lines[index].strip()
            index += 1
            continue
        start = index
        body = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith("```"):
            body.append(lines[index])
            index += 1
        mark = MARK.match(previous)
        found.append(
            Block(
                document=document,
                line=start + 1,
                language=fence["lang"],
                body=body,
                mark=("not runnable" if mark["reason"] else "runnable") if mark else "",
                exit_code=int(mark["code"]) if mark and mark["code"] else 0,
                reason=mark["reason"] or "" if mark else "",
            )
        )
        previous = ""
        index += 1
    return found


ALL_BLOCKS = [block for document in DOCUMENTS for block in blocks(document)]
RUNNABLE = [
    (block, command) for block in ALL_BLOCKS if block.mark == "runnable" for command in block.commands()
]


def test_the_documents_show_runnable_commands() -> None:
    assert len(RUNNABLE) >= 10


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[block.where for block in ALL_BLOCKS])
def test_every_block_with_a_command_says_whether_it_runs_here(block: Block) -> None:
    shows_a_command = block.language in ("", "bash", "sh", "shell", "console") and any(
        COMMANDS.search(line) for line in block.body
    )
    if shows_a_command:
        assert block.mark, (
            f"{block.where} shows a command: mark it <!-- runnable --> (and this test runs it) or "
            "<!-- not runnable: why --> on the line before the fence"
        )
    if block.mark == "runnable":
        assert block.commands(), f"{block.where} is marked runnable but has no command"


@pytest.mark.slow  # the demo, a synth of the stack, a simulated schedule: `make test` runs them
@pytest.mark.parametrize(
    ("block", "command"), RUNNABLE, ids=[f"{block.where} {command}"[:100] for block, command in RUNNABLE]
)
def test_a_runnable_command_runs_as_the_document_says(block: Block, command: str) -> None:
    environment = {
        **os.environ,
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), str(ROOT / "node_modules" / ".bin"), os.environ["PATH"]]
        ),
        "NO_COLOR": "1",
    }
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert result.returncode == block.exit_code, (
        f"{block.where}: `{command}` exited {result.returncode}, the document says {block.exit_code}\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    )
    assert "Traceback" not in result.stderr
