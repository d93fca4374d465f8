"""Read capacity: how the instance was bought, and the decision revised for it before the cordon."""

from nodeheal.lambda_support import workflow_handler
from nodeheal.steps import READ_CAPACITY
from nodeheal.workflow.capacity import read_capacity

handler = workflow_handler(
    READ_CAPACITY.name,
    lambda state, rt, deadline: read_capacity(state, rt.instances, rt.now()),
)
