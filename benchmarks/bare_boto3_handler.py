"""The baseline of the cold-start comparison: a bare boto3 handler making one DynamoDB call.

What the smallest useful Python Lambda costs: import boto3, create one client on first use,
read one item. Every NodeHeal handler's cold start is reported as a multiple of this one's.
"""

from __future__ import annotations

import os
from typing import Any

import boto3

_client: Any = None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    global _client  # noqa: PLW0603 - one client per container, as every Lambda keeps it
    if _client is None:
        _client = boto3.client("dynamodb", region_name=os.environ["AWS_REGION"])
    response = _client.get_item(
        TableName=os.environ["NODEHEAL_LEDGER_TABLE"], Key={"pk": {"S": "bench"}, "sk": {"S": "bench"}}
    )
    return {"found": "Item" in response}
