"""Commands that need an optional part of the package refuse clearly when it is not installed.

``pip install nodeheal`` gives the operator commands (explain, history, breaker, inject, exporter...);
the local simulation (demo, simulate) also needs the CDK and moto, the ``demo`` extra of
pyproject.toml. Without it they would fail deep inside an import with a traceback; this names the
extra instead.
"""

from __future__ import annotations

import importlib.util

from nodeheal.errors import ConfigurationError

#: The top-level modules each extra provides that the commands import.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "cdk": ("aws_cdk", "constructs", "cdk_nag"),
    "demo": ("aws_cdk", "constructs", "cdk_nag", "moto", "jsonpath_ng", "aws_lambda_powertools"),
}


def require_extra(extra: str, command: str) -> None:
    """Raise ConfigurationError naming the extra when a module it provides cannot be imported."""
    missing = [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"nodeheal {command} needs the {extra!r} extra ({', '.join(missing)} not installed): in the "
            f"source checkout run `make bootstrap`, or `pip install -e '.[{extra}]'`"
        )
