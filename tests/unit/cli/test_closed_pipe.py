"""A reader that goes away (``nodeheal explain | head -1``) ends the command quietly.

The CLI runs in a subprocess whose stdout is a real pipe, and the reader closes that pipe, as
``head`` does when it has what it wants. Two moments: after the first line (the command is still
writing: its next write fails inside the command), and before any output (the command's buffered
output fails only when it is flushed at the end). Either way: exit 141, as a shell reports for a
tool that SIGPIPE ended, and nothing on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeheal.cli import EXIT_PIPE_CLOSED

ROOT = Path(__file__).resolve().parents[3]

#: Runs the CLI with its stdout line-buffered (each line is written as it is printed) and held
#: after the first line until the reader has closed the pipe: the order ``| head -1`` produces,
#: without a race. POLLERR on a pipe's write end means no reader is left.
HEAD_ONE = """
import io, os, select, sys

class FirstLineThenReaderGone(io.RawIOBase):
    sent_first_line = False

    def writable(self):
        return True

    def fileno(self):
        return 1

    def write(self, data):
        data = bytes(data)
        if self.sent_first_line or b"\\n" not in data:
            return os.write(1, data)
        written = os.write(1, data[: data.index(b"\\n") + 1])
        self.sent_first_line = True
        poller = select.poll()
        poller.register(1, select.POLLERR)
        poller.poll(60_000)
        return written

sys.stdout = io.TextIOWrapper(io.BufferedWriter(FirstLineThenReaderGone()), line_buffering=True)
from nodeheal.cli import main
sys.exit(main(sys.argv[1:]))
"""

COMMANDS = {
    "explain": ("explain", "--config", "cdk.json"),
    "demo --list": ("demo", "--list"),
}


def _environment() -> dict[str, str]:
    """stdout block-buffered, as it is for a user's pipe: PYTHONUNBUFFERED would turn the reader
    gone before any output into a failed write inside the command, the other test's case."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("PYTHONUNBUFFERED", None)
    return environment


def _assert_quiet(code: int, err: str) -> None:
    assert code == EXIT_PIPE_CLOSED == 141, err
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
    assert "Exception ignored" not in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_reader_gone_after_the_first_line(command: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HEAD_ONE, *COMMANDS[command]],
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()
    child.stdout.close()
    err = child.stderr.read().decode()
    code = child.wait(timeout=120)
    assert first.strip(), err
    _assert_quiet(code, err)


@pytest.mark.parametrize("command", [*sorted(COMMANDS), "--help"])
def test_reader_gone_before_any_output(command: str) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nodeheal", *COMMANDS.get(command, (command,))],
            cwd=ROOT,
            env=_environment(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    _assert_quiet(done.returncode, done.stderr.decode())
