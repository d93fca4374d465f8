"""Lambda entry points: one thin handler per task (see stacks/workflow_tasks.py)."""
