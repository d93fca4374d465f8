"""Subcommands of the ``nodeheal`` CLI; each module exposes ``register(subparsers)``."""
