"""Lambda entry points: one thin handler per task (each step's entry in nodeheal/steps.py names it)."""
