"""Record the outcome in the ledger, release the lock and budget slot, notify when useful."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from nodeheal.deadline import Deadline
from nodeheal.lambda_support import metrics, workflow_handler
from nodeheal.runtime import Runtime
from nodeheal.steps import RECORD
from nodeheal.workflow.recording import record
from nodeheal.workflow.state import WorkflowState


def emit_outcome_metrics(result: dict[str, Any], state: WorkflowState) -> None:
    """Remediations by outcome and by action, the two numbers users pick a remediation system on,
    and drains that PodDisruptionBudgets held up.

    The timings carry no outcome dimension: a percentile cannot be combined across dimension
    values, and the dashboard wants one time-to-cordon over every remediation. Time to the instance
    action is split by action, since a reboot and a replacement are different promises.
    """
    decision = (state.step("admission") or {}).get("decision") or {}
    action = str(decision.get("action", "none"))
    metrics.add_dimension(name="outcome", value=str(result["outcome"]))
    metrics.add_metric(name="Remediations", unit=MetricUnit.Count, value=1)
    with single_metric(name="RemediationsByAction", unit=MetricUnit.Count, value=1) as by_action:
        by_action.add_dimension(name="action", value=action)
    stages = result.get("stageSeconds") or {}
    if "faultToCordon" in stages:
        with single_metric(
            name="TimeToCordon", unit=MetricUnit.Seconds, value=float(stages["faultToCordon"])
        ):
            pass
    if "faultToInstanceAction" in stages:
        with single_metric(
            name="TimeToInstanceAction", unit=MetricUnit.Seconds, value=float(stages["faultToInstanceAction"])
        ) as timing:
            timing.add_dimension(name="action", value=action)
    if int((state.step("drain") or {}).get("pdbBlocked", 0)) > 0:
        with single_metric(name="DrainsBlockedByPdb", unit=MetricUnit.Count, value=1):
            pass


def _record(state: WorkflowState, rt: Runtime, deadline: Deadline) -> dict[str, Any]:
    # Only DynamoDB and SNS: the deadline bounds them through the invocation's context.
    result = record(state, rt.ledger, rt.notifier, rt.now(), region=rt.environment.region)
    emit_outcome_metrics(result, state)
    return result


handler = workflow_handler(RECORD.name, _record)
