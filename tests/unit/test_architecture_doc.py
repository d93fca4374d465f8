"""docs/architecture.md is where the design lives: every decision the code cites is a heading there.

Comments, docstrings and docs cite decisions by number (``D16 in docs/architecture.md``, ``(D2)``).
A citation of a decision that has no heading in the document, or of a design file outside the
repository, sends the reader nowhere; these tests keep every citation pointing at a real section.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: Where the project's code, tests and docs live (build output and dependencies are not scanned).
SCANNED = (
    "nodeheal",
    "lambdas",
    "stacks",
    "tests",
    "benchmarks",
    "docs",
    "scripts",
    "deploy",
    "examples",
    "README.md",
    "Makefile",
    "app.py",
    "pyproject.toml",
)
SKIPPED_DIRS = {"__pycache__", "node_modules", ".venv", "build", "cdk.out"}

#: A decision heading: ``### D16 Test time`` (its anchor is ``#d16-test-time``).
HEADING = re.compile(r"^### D(\d+) ", re.MULTILINE)
#: A citation of a decision: D followed by its number, not part of a longer word.
CITATION = re.compile(r"(?<![\w-])D(\d+)(?!\w)")
#: The design file that used to live outside the repository (spelled in two parts so that this file
#: does not name it).
OLD_DESIGN_FILE = "DESIGN" + ".md"


def decisions(text: str) -> set[int]:
    return {int(number) for number in HEADING.findall(text)}


def text_files(root: Path, scanned: Iterable[str]) -> Iterator[tuple[Path, str]]:
    for name in scanned:
        top = root / name
        paths = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in paths:
            if not path.is_file() or SKIPPED_DIRS.intersection(path.relative_to(root).parts):
                continue
            try:
                yield path, path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary files cite nothing


def dangling(root: Path, scanned: Iterable[str], known: set[int]) -> list[str]:
    found = []
    for path, text in text_files(root, scanned):
        for line_number, line in enumerate(text.splitlines(), start=1):
            for match in CITATION.finditer(line):
                if int(match.group(1)) not in known:
                    found.append(f"{path.relative_to(root)}:{line_number}: D{match.group(1)}")
    return found


def test_the_document_has_every_decision_once_in_order() -> None:
    numbers = HEADING.findall(ARCHITECTURE.read_text(encoding="utf-8"))
    assert [int(n) for n in numbers] == list(range(1, 23))


def test_every_cited_decision_is_a_heading_of_the_document() -> None:
    known = decisions(ARCHITECTURE.read_text(encoding="utf-8"))
    assert dangling(ROOT, SCANNED, known) == []


def test_no_file_names_the_old_design_file() -> None:
    naming = [
        str(path.relative_to(ROOT)) for path, text in text_files(ROOT, SCANNED) if OLD_DESIGN_FILE in text
    ]
    assert naming == []


def test_readme_links_the_architecture_document() -> None:
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "line",
    # Built from parts, so that this file cites no missing decision itself.
    ["a rule (D" + "99) with no section", "as D" + "0 in docs/architecture.md says", "D" + "22's bound"],
)
def test_a_citation_of_a_missing_decision_is_caught(tmp_path: Path, line: str) -> None:
    (tmp_path / "module.py").write_text(f"# {line}\n", encoding="utf-8")
    assert len(dangling(tmp_path, ["module.py"], set(range(1, 22)))) == 1


@pytest.mark.parametrize("line", ["CUDA_D2D copies", "a 3D view", "mode-D2 is not a decision"])
def test_words_that_contain_a_d_number_are_not_citations(tmp_path: Path, line: str) -> None:
    (tmp_path / "module.py").write_text(f"# {line}\n", encoding="utf-8")
    assert dangling(tmp_path, ["module.py"], set()) == []
