from __future__ import annotations

import pytest

from nodeheal.commands.demo import make_sources_importable
from nodeheal.sim.seeded.template import SimTemplate


@pytest.fixture(scope="session")
def template() -> SimTemplate:
    """The stack as deployed, synthesized once per test process (about 10 s)."""
    from nodeheal.sim.seeded.runner import load_template

    make_sources_importable()
    return load_template()
