"""Terminate the node's EC2 instance after re-verifying the node, the condition and ownership."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import TERMINATE
from nodeheal.workflow.mutations import terminate

handler = workflow_handler(
    TERMINATE.name,
    lambda state, rt, deadline: terminate(
        state,
        rt.kube(state.cluster, deadline),
        rt.instances,
        rt.ledger,
        rt.now(),
        mode=rt.mode(state.settings.mode),
    ),
)
