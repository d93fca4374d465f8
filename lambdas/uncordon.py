"""Undo NodeHeal's own cordon after a successful reboot (never a person's cordon)."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import UNCORDON
from nodeheal.workflow.mutations import uncordon

handler = workflow_handler(
    UNCORDON.name,
    lambda state, rt, deadline: uncordon(
        state, rt.kube(state.cluster, deadline), rt.ledger, rt.now(), mode=rt.mode(state.settings.mode)
    ),
)
