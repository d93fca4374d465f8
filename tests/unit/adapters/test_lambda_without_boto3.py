"""The Lambda functions work with boto3 unimportable: their clients are botocore's.

Importing boto3 costs every cold start its s3transfer import (nodeheal.runtime.aws_client_factory
says why NodeHeal does without). This runs the handlers' imports and the ledger's real
DynamoDB traffic in an interpreter where ``import boto3`` fails, against moto's server, with the
trimmed DynamoDB model the Lambda asset carries (nodeheal.aws.service_models).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from nodeheal.aws.service_models import TRIMMED_OPERATIONS, write_trimmed_models
from tests.aws_fixtures import create_ledger_table

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-west-2"
TABLE = "nodeheal-ledger"

CHILD = """
import importlib, json, sys
from datetime import datetime, timedelta, timezone

for blocked in ("boto3", "s3transfer"):
    sys.modules[blocked] = None  # `import boto3` raises ImportError from here on

for name in {modules!r}:
    importlib.import_module(name)

from nodeheal.aws.ledger import Ledger
from pathlib import Path
from nodeheal.runtime import aws_client_factory
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.actions import Action
from nodeheal.workflow.locks import LockClaim

now = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)
client = aws_client_factory("{region}", models=Path({models!r}))("dynamodb")
ledger = Ledger(client, "{table}", clock=lambda: now)
written = ledger.write_admission_state(ClusterAdmissionState(cluster="prod", paused=True, paused_reason="drill"))
read = ledger.read_admission_state("prod")
lock = ledger.acquire_lock("prod", "i-0abc", "exec-1", timedelta(minutes=30), LockClaim(node="gpu-1", condition_type="GPUProblem", action=Action.REPLACE, acts_at=now))
print(json.dumps({{
    "version": read.version == written.version,
    "paused": [read.paused, read.paused_reason],
    "lock": ledger.lock_holder("prod", "i-0abc"),
    "acquired": lock.acquired,
    "operations": sorted(client.meta.service_model.operation_names),
    "loaded": sorted(m for m in ("boto3", "s3transfer") if sys.modules.get(m) is not None),
}}))
"""


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client(
            "dynamodb",
            region_name=REGION,
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        create_ledger_table(client, TABLE)
        yield endpoint
    finally:
        server.stop()


def test_handlers_and_the_ledger_run_with_boto3_unimportable(moto_endpoint: str, tmp_path: Path) -> None:
    write_trimmed_models(tmp_path)
    modules = sorted(
        f"lambdas.{path.stem}" for path in (ROOT / "lambdas").glob("*.py") if path.stem != "__init__"
    )
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "NODEHEAL_"))
    }
    environment.update(
        {
            "PYTHONPATH": str(ROOT),
            "AWS_ENDPOINT_URL": moto_endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": REGION,
        }
    )
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD.format(modules=modules, region=REGION, table=TABLE, models=str(tmp_path)),
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.splitlines()[-1])
    assert result == {
        "version": True,
        "paused": [True, "drill"],
        "lock": "exec-1",
        "acquired": True,
        "operations": sorted(TRIMMED_OPERATIONS["dynamodb"]),
        "loaded": [],
    }
