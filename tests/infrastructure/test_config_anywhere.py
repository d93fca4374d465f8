"""Commands that synthesize the stack read a cdk.json from anywhere, not only from the checkout.

``test-pattern --config`` once imported the CDK app from the directory of the file it was given,
so a cdk.json copied elsewhere failed with "No module named 'stacks'". The stack comes from the
checkout the package runs from, as for ``demo --config``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.infrastructure.conftest import ROOT
from tests.unit.test_patterns_moto import condition_detail

NODEHEAL = ROOT / ".venv" / "bin" / "nodeheal"


def test_test_pattern_reads_a_cdk_json_outside_the_checkout(tmp_path: Path) -> None:
    document = json.loads((ROOT / "cdk.json").read_text())
    document["context"]["nodeheal"]["clusters"] = ["elsewhere"]
    config = tmp_path / "mine" / "cdk.json"
    config.parent.mkdir()
    config.write_text(json.dumps(document))
    event = tmp_path / "xid79.json"
    event.write_text(json.dumps({**condition_detail("GPUProblem", "True"), "cluster": "elsewhere"}))
    for cwd, config_args, read in (
        (tmp_path, ["--config", str(config)], str(config)),
        (config.parent, [], str(config)),
    ):
        result = subprocess.run(
            [str(NODEHEAL), "test-pattern", *config_args, "--expect", "match", str(event)],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "1 of 1 event(s) match at least one rule" in result.stdout, result.stdout
        # Without --config, the working directory's cdk.json; either way stderr names it.
        assert result.stderr == f"settings: {read}\n", result.stderr
