"""The decision policy: Xid catalog, signal parsing, classification and the per-node decision.

Everything here is pure (no I/O beyond reading the packaged catalog once), so the admit Lambda,
``nodeheal explain`` and the tests all run the same code on the same inputs.
"""

from nodeheal.policy.catalog import XidEntry, lookup
from nodeheal.policy.classify import Classification, classify
from nodeheal.policy.decide import Decision, NodeHistory, decide

__all__ = [
    "Classification",
    "Decision",
    "NodeHistory",
    "XidEntry",
    "classify",
    "decide",
    "lookup",
]
