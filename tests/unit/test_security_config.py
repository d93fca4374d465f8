"""``security.kmsKeyArn`` and ``ingest.reservedConcurrency``: defaults, accepted values, refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeheal.deploy_config import (
    DEFAULT_INGEST_RESERVED_CONCURRENCY,
    CustomerKey,
    NodeHealConfig,
    load_cdk_json,
)
from nodeheal.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL: dict[str, Any] = {"clusters": ["training-on-eks"]}
KEY_ID = "1234abcd-12ab-34cd-56ef-1234567890ab"


def parse(**overrides: Any) -> NodeHealConfig:
    return NodeHealConfig.from_cdk_context({**MINIMAL, **overrides})


def test_defaults_keep_the_services_keys_and_reserve_ten_for_ingest() -> None:
    config = parse()
    assert config.customer_key is None
    assert config.ingest_reserved_concurrency == DEFAULT_INGEST_RESERVED_CONCURRENCY == 10


def test_the_shipped_cdk_json_names_both_settings_with_their_defaults() -> None:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]
    assert context["security"] == {"kmsKeyArn": None}
    assert context["ingest"]["reservedConcurrency"] == DEFAULT_INGEST_RESERVED_CONCURRENCY
    shipped = load_cdk_json(ROOT / "cdk.json")
    assert shipped.customer_key is None


@pytest.mark.parametrize(
    ("arn", "partition", "region", "account"),
    [
        (f"arn:aws:kms:us-west-2:111122223333:key/{KEY_ID}", "aws", "us-west-2", "111122223333"),
        (f"arn:aws-cn:kms:cn-north-1:111122223333:key/{KEY_ID}", "aws-cn", "cn-north-1", "111122223333"),
        (
            f"arn:aws-us-gov:kms:us-gov-west-1:111122223333:key/{KEY_ID}",
            "aws-us-gov",
            "us-gov-west-1",
            "111122223333",
        ),
        # A multi-Region key.
        (
            "arn:aws:kms:eu-central-1:444455556666:key/mrk-1234abcd12ab34cd56ef1234567890ab",
            "aws",
            "eu-central-1",
            "444455556666",
        ),
    ],
)
def test_a_key_arn_is_accepted_with_its_region(arn: str, partition: str, region: str, account: str) -> None:
    key = parse(security={"kmsKeyArn": arn}).customer_key
    assert key == CustomerKey(arn=arn, partition=partition, region=region, account=account)


@pytest.mark.parametrize(
    ("arn", "reason"),
    [
        ("arn:aws:kms:us-west-2:111122223333:alias/nodeheal", "names an alias"),
        ("alias/nodeheal", "names an alias"),
        (KEY_ID, "is a bare key id"),
        (f"arn:aws:kms:us-west-2:1111:key/{KEY_ID}", "is not a KMS key ARN"),
        (f"arn:aws:s3:us-west-2:111122223333:key/{KEY_ID}", "is not a KMS key ARN"),
        ("arn:aws:kms:us-west-2:111122223333:key/not-a-key-id", "is not a KMS key ARN"),
        (f"arn:aws:kms:us-west-2:111122223333:key/{KEY_ID.upper()}", "is not a KMS key ARN"),
    ],
)
def test_anything_but_a_key_arn_is_refused_with_the_expected_shape(arn: str, reason: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse(security={"kmsKeyArn": arn})
    message = str(refused.value)
    assert message.startswith(f"nodeheal.security.kmsKeyArn {reason}")
    assert "arn:<partition>:kms:<region>:<account>:key/<key id>" in message
    assert repr(arn) in message


@pytest.mark.parametrize(
    ("security", "match"),
    [
        ({"kmsKeyArn": ""}, "nodeheal.security.kmsKeyArn must be a non-empty string or absent"),
        ({"kmsKeyArn": 7}, "nodeheal.security.kmsKeyArn must be a non-empty string or absent"),
        ({"kmsKeyARN": f"arn:aws:kms:us-west-2:111122223333:key/{KEY_ID}"}, "did you mean 'kmsKeyArn'"),
        ("arn", "nodeheal.security must be an object"),
    ],
)
def test_malformed_security_settings_are_refused(security: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        parse(security=security)


@pytest.mark.parametrize("value", [1, 10, 250, 10_000])
def test_reserved_concurrency_takes_a_positive_integer(value: int) -> None:
    assert parse(ingest={"reservedConcurrency": value}).ingest_reserved_concurrency == value


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (0, r"reservedConcurrency must be >= 1, got 0"),
        (10_001, r"reservedConcurrency must be <= 10000"),
        (2.5, r"reservedConcurrency must be an integer"),
        (True, r"reservedConcurrency must be an integer"),
    ],
)
def test_reserved_concurrency_outside_its_range_is_refused(value: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        parse(ingest={"reservedConcurrency": value})


@pytest.mark.slow  # a real synth of the stack: `make test` runs it, `make check` does not
def test_cdk_synth_reports_a_bad_key_in_one_line_and_fails(tmp_path: Path) -> None:
    """app.py as the CDK CLI runs it: the context arrives in CDK_CONTEXT_JSON."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context["nodeheal"]["security"] = {"kmsKeyArn": "alias/nodeheal"}
    completed = subprocess.run(
        [sys.executable, str(ROOT / "app.py")],
        cwd=tmp_path,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps(context),
            "CDK_OUTDIR": str(tmp_path),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2
    (line,) = completed.stderr.strip().splitlines()
    assert line.startswith("NodeHeal configuration error: nodeheal.security.kmsKeyArn names an alias")
