"""Ingest: validate the contract and the sender's Source, drop stale and foreign events, start a
named execution."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodeheal.deadline import Deadline, applied
from nodeheal.events import EXPORTER_HEARTBEATS_METRIC
from nodeheal.lambda_support import logger, metrics
from nodeheal.runtime import Runtime, runtime
from nodeheal.workflow.ingest import (
    heartbeat,
    heartbeat_refusal,
    ingest,
    is_heartbeat,
    record_refused_heartbeat,
)


def _heartbeat(event: dict[str, Any], rt: Runtime) -> dict[str, str]:
    """Count an exporter heartbeat per cluster: the alarm on missing heartbeats reads these."""
    beat = heartbeat(event, rt.ingest_settings)
    refusal = heartbeat_refusal(event, rt.ingest_settings) if beat is None else None
    if refusal is not None:
        # One cluster's exporter speaking for another would keep that cluster's alarm quiet.
        dropped = record_refused_heartbeat(event, *refusal, ledger=rt.ledger, now=rt.now())
        metrics.add_metric(name="HeartbeatsRefused", unit=MetricUnit.Count, value=1)
        logger.warning("heartbeat refused", extra={"result": dropped.to_json(), "eventId": event.get("id")})
        return {"status": "dropped", "reason": dropped.reason, "category": dropped.category}
    if beat is None:
        logger.warning(
            "heartbeat ignored (malformed, foreign source or cluster)", extra={"eventId": event.get("id")}
        )
        return {"status": "ignored", "reason": "not a heartbeat of this deployment"}
    metrics.add_dimension(name="cluster", value=beat.cluster)
    metrics.add_metric(name=EXPORTER_HEARTBEATS_METRIC, unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="ExporterEventsPublished", unit=MetricUnit.Count, value=beat.published)
    metrics.add_metric(name="ExporterPublishFailures", unit=MetricUnit.Count, value=beat.publish_failures)
    metrics.add_metric(name="ExporterEventsDropped", unit=MetricUnit.Count, value=beat.dropped)
    metrics.add_metric(name="ExporterQueueDepth", unit=MetricUnit.Count, value=beat.queue_depth)
    return {"status": "heartbeat", "cluster": beat.cluster}


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, str]:
    rt = runtime()
    if is_heartbeat(event):
        return _heartbeat(event, rt)
    # DynamoDB and StartExecution calls stop retrying at the deadline (see nodeheal.deadline).
    with applied(Deadline.from_lambda_context(context)):
        result = ingest(
            event, settings=rt.ingest_settings, starter=rt.starter, ledger=rt.ledger, now=rt.now()
        )
    metrics.add_metric(name=f"Events{result.status.capitalize()}", unit=MetricUnit.Count, value=1)
    if result.warning:
        # Contract "1" is accepted until 0.2.0 removes it: this counts the exporters still to upgrade.
        metrics.add_metric(name="EventsLegacyContract", unit=MetricUnit.Count, value=1)
        logger.warning("legacy contract event", extra={"warning": result.warning, "eventId": event.get("id")})
    if result.status == "dropped":
        logger.warning("event dropped", extra={"result": result.to_json(), "eventId": event.get("id")})
    else:
        logger.info("event ingested", extra={"result": result.to_json()})
    return result.to_json()
