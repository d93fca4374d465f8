"""The remediation's domain: admit, the guard before every step, drain, the instance action,
recording and the episode memory, over ports (:mod:`nodeheal.workflow.ports`) that adapters fill."""
