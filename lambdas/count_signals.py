"""Count signals: add a Warning Node Event to its instance's window, start a remediation when the
window crosses its threshold (docs/architecture.md, D22)."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodeheal.deadline import Deadline, applied
from nodeheal.lambda_support import logger, metrics
from nodeheal.runtime import runtime
from nodeheal.workflow.counting import count_node_event


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rt = runtime()
    # DynamoDB and StartExecution calls stop retrying at the deadline (see nodeheal.deadline).
    with applied(Deadline.from_lambda_context(context)):
        result = count_node_event(
            event,
            settings=rt.ingest_settings,
            policy=rt.environment.counting_policy,
            windows=rt.ledger,
            starter=rt.starter,
            ledger=rt.ledger,
            now=rt.now(),
        )
    # SignalsCounted, SignalsCrossed, SignalsDuplicate, SignalsIgnored, SignalsUnattributed,
    # SignalsDropped.
    metrics.add_metric(name=f"Signals{result.status.capitalize()}", unit=MetricUnit.Count, value=1)
    if result.status in ("dropped", "unattributed"):
        event_id = event.get("id") if isinstance(event, dict) else None
        logger.warning("node event dropped", extra={"result": result.to_json(), "eventId": event_id})
    elif result.status in ("counted", "crossed"):
        logger.info(f"node event {result.status}", extra={"result": result.to_json()})
    else:
        # Ignored (no counted signal, or before the window) and duplicates: the bulk of a storm.
        logger.debug(f"node event {result.status}", extra={"result": result.to_json()})
    return result.to_json()
