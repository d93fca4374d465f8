"""Reboot the node's EC2 instance after re-verifying the node, the condition and ownership."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import REBOOT
from nodeheal.workflow.mutations import reboot

handler = workflow_handler(
    REBOOT.name,
    lambda state, rt, deadline: reboot(
        state,
        rt.kube(state.cluster, deadline),
        rt.instances,
        rt.ledger,
        rt.now(),
        mode=rt.mode(state.settings.mode),
    ),
)
