"""One eviction round of the drain loop (the state machine waits between rounds)."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import DRAIN
from nodeheal.workflow.mutations import drain_round

handler = workflow_handler(
    DRAIN.name,
    lambda state, rt, deadline: drain_round(
        state, rt.kube(state.cluster, deadline), rt.ledger, rt.now(), mode=rt.mode(state.settings.mode)
    ),
)
