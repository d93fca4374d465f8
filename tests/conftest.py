"""Suite-wide test settings.

Sockets: pytest-socket (configured in pyproject.toml) allows loopback only, so a test that would
reach the internet or a real AWS endpoint fails instead of passing by accident.
AWS: fake credentials and a region, so neither boto3 nor moto ever looks for real ones.
"""

from __future__ import annotations

import os

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_SESSION_TOKEN", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
os.environ.setdefault("AWS_REGION", "us-west-2")
os.environ.pop("AWS_PROFILE", None)
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "NodeHeal")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "nodeheal")
# moto's EC2 backend would load its default AMIs (a snapshot and a volume each) for every test that
# touches EC2; no test reads an image, and the instances name one moto does not validate.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


# -- the fake API server's conformance table (docs/fake-apiserver.md) --------------------------------
#
# Every (method, path, status) the fake API server answered during the run must have a row in the
# table, where the real server's behaviour and its source are written down. Workers of pytest-xdist
# hand their keys to the controller, which checks the union once. NODEHEAL_FAKE_API_ROWS=FILE writes
# every key served, as table rows, to FILE (a start for a new row).

import json
import logging
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from nodeheal.sim.apiserver import conformance

# Property tests judge values, never speed: with the cores busy (mypy beside the suite, a loaded CI
# machine) one slow draw made Hypothesis fail a correct test. Its timing checks are off suite-wide.
settings.register_profile(
    "nodeheal", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("nodeheal")

CONFORMANCE_TABLE = Path(__file__).resolve().parent.parent / "docs" / "fake-apiserver.md"
_WORKER_OUTPUT_KEY = "fake_api_rows"
_from_workers: set[conformance.RowKey] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {}) or {}
    for method, path, status in json.loads(output.get(_WORKER_OUTPUT_KEY, "[]")):
        _from_workers.add(conformance.RowKey(method, path, status))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    served = conformance.served()
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output[_WORKER_OUTPUT_KEY] = json.dumps([[r.method, r.path, r.status] for r in sorted(served)])
        return
    served |= _from_workers
    dump = os.environ.get("NODEHEAL_FAKE_API_ROWS")
    if dump:
        Path(dump).write_text("".join(f"{row.describe()}\n" for row in sorted(served)), encoding="utf-8")
    missing = conformance.missing_rows(served, CONFORMANCE_TABLE)
    if not missing:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [
        f"The fake API server answered {len(missing)} request kind(s) that {CONFORMANCE_TABLE.name} has no row "
        "for. Add each, with the real server's behaviour, its source and the test that pins it:",
        *(f"  {row.describe()}" for row in missing),
    ]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# -- the package logger, restored after each test ---------------------------------------------------
#
# A handler under test builds Powertools' Logger(service="nodeheal"), which configures the package's
# own logger as Lambda wants it: its level from POWERTOOLS_LOG_LEVEL (the demo sets CRITICAL) and no
# propagation to the root. Left in place, that silences every nodeheal.* record for the tests that
# run after it in the same worker, so a caplog assertion would depend on test order.


@pytest.fixture(autouse=True)
def _restore_the_nodeheal_logger() -> Iterator[None]:
    package = logging.getLogger("nodeheal")
    saved = (package.level, list(package.handlers), package.propagate, package.disabled)
    yield
    package.setLevel(saved[0])
    package.handlers[:] = saved[1]
    package.propagate = saved[2]
    package.disabled = saved[3]


# A command run in-process (``main(["demo", ...])``) sets what its own process should have: the
# demo turns Powertools' metrics and logs off for the rest of the process. Left in the worker, the
# next test that reads a handler's EMF metrics finds none, so such a test would depend on order.


@pytest.fixture(autouse=True)
def _restore_the_environment() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


# -- botocore's service models, loaded once per worker ---------------------------------------------
#
# moto drops boto3's default session each time a mock starts, and botocore gives every session a
# model loader of its own: each test that started a mock and made clients parsed the JSON models
# (EC2's alone is megabytes) again, about 2 s a test for the CLI and adapter tests. The sessions of
# the whole run share one loader per data path instead, as the local pipeline's already do
# (nodeheal.sim.moto_patches.share_model_loaders): a loader never changes a model it loaded, and a
# session with another data path (AWS_DATA_PATH, a directory of trimmed models) gets its own.


@pytest.fixture(scope="session", autouse=True)
def _share_botocore_model_loaders() -> Iterator[None]:
    from nodeheal.sim import moto_patches

    patchers = moto_patches.share_model_loaders()
    yield
    for patcher in reversed(patchers):
        patcher.stop()


# -- the rewritten test modules, kept between runs ---------------------------------------------------
#
# pytest rewrites the asserts of every test module it imports and keeps the result in
# __pycache__/*-pytest-*.pyc, but not when bytecode writing is off (PYTHONDONTWRITEBYTECODE, set by
# the Makefile and on the build machines): then each run, and each xdist worker of a run, rewrote all
# of them again, about 15 s of a worker's start. Writing is on while the tests are collected only;
# the tests themselves, and every subprocess they start, run as the environment says.


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, None, None]:
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved
