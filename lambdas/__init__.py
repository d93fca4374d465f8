"""Lambda entry points: one thin handler per task (see nodeheal/cdk/workflow_tasks.py)."""
