"""The process the seeded simulation's handlers run in: what they read at import, and their output.

Every Lambda function runs in this one Python process. :func:`prepare_handlers` sets, before the
first handler module is imported, the environment Powertools reads at import and keeps its logger
to errors; :func:`quiet` keeps what a handler prints for CloudWatch off the terminal while it runs.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

from nodeheal.sim.seeded.template import SimTemplate


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Handlers log and print metrics for CloudWatch; the simulation keeps them off the terminal."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _export_shared_environment(template: SimTemplate) -> None:
    """Powertools reads its namespace and service name from the process environment when a handler
    module is imported; every function runs in this one process, so the values they share are set."""
    import os

    for key in ("POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_SERVICE_NAME"):
        values = {f.environment.get(key) for f in template.functions.values()}
        value = template.ingest.environment.get(key)
        if value and len(values) == 1:
            os.environ.setdefault(key, value)


def prepare_handlers(template: SimTemplate) -> None:
    """Before the first handler module is imported: the environment Powertools reads at import,
    and its logger kept to errors (the trace is the simulation's log)."""
    _export_shared_environment(template)
    from nodeheal.lambda_support import logger

    logger.setLevel(logging.CRITICAL)
