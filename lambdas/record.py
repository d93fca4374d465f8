"""Record the outcome in the ledger, release the lock and budget slot, notify when useful."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from nodeheal.lambda_support import metrics, workflow_handler
from nodeheal.runtime import Runtime
from nodeheal.workflow.recording import record
from nodeheal.workflow.state import WorkflowState


def emit_outcome_metrics(result: dict[str, Any]) -> None:
    """Remediations by outcome, and the two numbers users pick a remediation system on."""
    metrics.add_dimension(name="outcome", value=str(result["outcome"]))
    metrics.add_metric(name="Remediations", unit=MetricUnit.Count, value=1)
    stages = result.get("stageSeconds") or {}
    for stage, metric in (
        ("faultToCordon", "TimeToCordon"),
        ("faultToInstanceAction", "TimeToInstanceAction"),
    ):
        if stage in stages:
            metrics.add_metric(name=metric, unit=MetricUnit.Seconds, value=float(stages[stage]))


def _record(state: WorkflowState, rt: Runtime) -> dict[str, Any]:
    result = record(state, rt.ledger, rt.notifier, rt.now(), region=rt.environment.region)
    emit_outcome_metrics(result)
    return result


handler = workflow_handler("record", _record)
