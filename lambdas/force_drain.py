"""drain.onTimeout=force: delete the pods left on the node with the configured grace period."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import FORCE_DRAIN
from nodeheal.workflow.mutations import force_drain

handler = workflow_handler(
    FORCE_DRAIN.name,
    lambda state, rt, deadline: force_drain(
        state, rt.kube(state.cluster, deadline), rt.ledger, rt.now(), mode=rt.mode(state.settings.mode)
    ),
)
