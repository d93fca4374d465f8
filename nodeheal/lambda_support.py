"""The shape every NodeHeal Lambda handler shares: parse, call one domain function, return JSON.

Logging is Powertools' structured JSON with the execution, cluster and node on every line;
metrics are Powertools EMF (namespace from POWERTOOLS_METRICS_NAMESPACE). Exceptions are not
caught: their class name is the Step Functions error name the Retry/Catch clauses match.

Each invocation gets a :class:`~nodeheal.deadline.Deadline`: the context's remaining time minus a
reserve. The step passes it to the Kubernetes adapters (``rt.kube(cluster, deadline)``); AWS calls
read it from the invocation's context (:func:`nodeheal.deadline.applied`). A call that would run
past it raises ``DeadlineExceededError``, which the state machine retries, before Lambda's timeout
kills the function without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodeheal.deadline import Deadline, applied
from nodeheal.runtime import Runtime, runtime
from nodeheal.workflow.state import WorkflowState

logger = Logger()
metrics = Metrics()

Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]
WorkflowStep = Callable[[WorkflowState, Runtime, Deadline], dict[str, Any]]


def _count_events(rt: Runtime) -> None:
    """The Kubernetes Events this invocation could not write (nodeheal.kube.event_writer): a step
    never fails for them, so these metrics are where a broken Events path shows."""
    tally = rt.event_tally.take()
    if tally.failed:
        metrics.add_metric(name="KubernetesEventsFailed", unit=MetricUnit.Count, value=tally.failed)
    if tally.skipped:
        metrics.add_metric(name="KubernetesEventsSkipped", unit=MetricUnit.Count, value=tally.skipped)


def workflow_handler(step_name: str, step: WorkflowStep) -> Handler:
    @metrics.log_metrics
    @logger.inject_lambda_context(clear_state=True)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        state = WorkflowState.parse(event)
        logger.append_keys(execution=state.execution.name, cluster=state.cluster, node=state.node_name)
        deadline = Deadline.from_lambda_context(context)
        rt = runtime()
        try:
            with applied(deadline):
                result = step(state, rt, deadline)
        finally:
            _count_events(rt)
        logger.info(f"{step_name} finished", extra={"result": result})
        return result

    handler.__name__ = f"{step_name}_handler"
    return handler
