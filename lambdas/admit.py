"""Admit: re-read the live Node, classify, apply history, budgets and breaker, take the lock."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from nodeheal.deadline import Deadline
from nodeheal.lambda_support import metrics, workflow_handler
from nodeheal.runtime import Runtime
from nodeheal.steps import ADMIT
from nodeheal.workflow.admission import admit
from nodeheal.workflow.state import WorkflowState


def _admit(state: WorkflowState, rt: Runtime, deadline: Deadline) -> dict[str, Any]:
    admission = admit(
        state, rt.kube(state.cluster, deadline), rt.ledger, rt.now(), mode=rt.mode(state.settings.mode)
    )
    if admission.refused:
        metrics.add_metric(name="AdmissionsRefused", unit=MetricUnit.Count, value=1)
    if admission.breaker_opened:
        metrics.add_metric(name="BreakerOpened", unit=MetricUnit.Count, value=1)
    return admission.to_json(event_message=state.event.condition.message)


handler = workflow_handler(ADMIT.name, _admit)
