"""Record a failed remediation (the node stays cordoned), release the lock, notify a person."""

from typing import Any

from lambdas.record import emit_outcome_metrics
from nodeheal.deadline import Deadline
from nodeheal.lambda_support import workflow_handler
from nodeheal.runtime import Runtime
from nodeheal.steps import RECORD_FAILURE
from nodeheal.workflow.recording import record_failure
from nodeheal.workflow.state import WorkflowState


def _record_failure(state: WorkflowState, rt: Runtime, deadline: Deadline) -> dict[str, Any]:
    # Only DynamoDB and SNS: the deadline bounds them through the invocation's context.
    result = record_failure(state, rt.ledger, rt.notifier, rt.now(), region=rt.environment.region)
    emit_outcome_metrics(result, state)
    return result


handler = workflow_handler(RECORD_FAILURE.name, _record_failure)
