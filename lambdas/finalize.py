"""Finalizer and sweeper: record, release and notify for executions that ended outside any Catch.

Invoked by EventBridge with a "Step Functions Execution Status Change" event (FAILED, TIMED_OUT,
ABORTED) of the remediation state machine, or by the schedule that runs the sweeper (D6).
"""

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodeheal.errors import InvalidEventError
from nodeheal.lambda_support import logger, metrics
from nodeheal.runtime import runtime
from nodeheal.workflow.finalizer import finalize, sweep

STATUS_CHANGE = "Step Functions Execution Status Change"


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rt = runtime()
    environment = rt.environment
    if event.get("detail-type") == STATUS_CHANGE:
        arn = (event.get("detail") or {}).get("executionArn")
        if not isinstance(arn, str) or not arn:
            raise InvalidEventError(f"{STATUS_CHANGE} event without detail.executionArn: {event.get('id')}")
        results = [
            finalize(
                arn,
                executions=rt.executions,
                ledger=rt.ledger,
                notifier=rt.notifier,
                now=rt.now(),
                region=environment.region,
                by="finalizer",
            )
        ]
    else:
        results = sweep(
            executions=rt.executions,
            ledger=rt.ledger,
            notifier=rt.notifier,
            now=rt.now(),
            region=environment.region,
            look_back=timedelta(seconds=environment.sweep_look_back_seconds),
            longest_execution=timedelta(seconds=environment.longest_execution_seconds),
        )
    recorded = [r.to_json() for r in results if r.status == "recorded"]
    if recorded:
        metrics.add_metric(name="ExecutionsFinalized", unit=MetricUnit.Count, value=len(recorded))
        logger.warning("executions ended outside any Catch were recorded", extra={"finalized": recorded})
    left = [r.to_json() for r in results if r.status == "recording"]
    if left:
        # Their Record step wrote what happened and may still be running: it ends them, or the
        # sweeper does once it cannot be running any more.
        logger.info("ended executions left to the Record step that wrote their record", extra={"left": left})
    return {"results": [r.to_json() for r in results]}
