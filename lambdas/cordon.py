"""Cordon: unschedulable, the nodeheal.io/unhealthy taint, annotations naming the execution."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import CORDON
from nodeheal.workflow.mutations import cordon

handler = workflow_handler(
    CORDON.name,
    lambda state, rt, deadline: cordon(
        state, rt.kube(state.cluster, deadline), rt.ledger, rt.now(), mode=rt.mode(state.settings.mode)
    ),
)
