"""After a reboot: has the node come back with a new boot ID, Ready, and the condition healthy?"""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import CHECK_RECOVERY
from nodeheal.workflow.mutations import check_recovery

handler = workflow_handler(
    CHECK_RECOVERY.name,
    lambda state, rt, deadline: check_recovery(state, rt.kube(state.cluster, deadline), rt.now()),
)
