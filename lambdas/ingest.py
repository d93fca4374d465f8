"""Ingest: validate contract v1, drop stale and foreign events, start a named execution."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodeheal.lambda_support import logger, metrics
from nodeheal.runtime import runtime
from nodeheal.workflow.ingest import ingest


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, str]:
    rt = runtime()
    result = ingest(event, settings=rt.ingest_settings, starter=rt.starter, ledger=rt.ledger, now=rt.now())
    metrics.add_metric(name=f"Events{result.status.capitalize()}", unit=MetricUnit.Count, value=1)
    if result.status == "dropped":
        logger.warning("event dropped", extra={"result": result.to_json(), "eventId": event.get("id")})
    else:
        logger.info("event ingested", extra={"result": result.to_json()})
    return result.to_json()
