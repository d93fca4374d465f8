"""``nodeheal demo``: the whole pipeline on this machine; watch a GPU node heal.

Everything runs in this process on loopback: the fake Kubernetes API server with a simulated GPU
cluster and a Karpenter stand-in, moto with the stack synthesized from ``stacks/`` (bus, rule,
ledger, topic, state machine executing the real Lambda handlers), and the real exporter. A
scenario injects a fault as node-problem-detector would; the timeline shows every hop.

The stack is synthesized from ``--config``, else ``./cdk.json`` (the checkout's, when run there),
else the built-in defaults, as every command that reads a configuration chooses, with the changes
the demo needs printed one by one before it starts (docs/architecture.md, D14): ``mode: full`` whatever the
file ships, the simulated cluster's name, the waits divided by ``--speed``, and the scenario's settings.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from nodeheal.commands.extras import require_extra
from nodeheal.commands.output import print_json
from nodeheal.deploy_config import config_source
from nodeheal.errors import ConfigurationError
from nodeheal.sim.stack.synthesized_app import quiet_jsii

#: The scenario ``nodeheal demo`` plays without ``--scenario``. Defined here, not imported from the
#: simulation, so that registering the command (every ``nodeheal`` run) needs no simulation package.
DEFAULT_SCENARIO = "xid79"
#: Real-world seconds per demo second: cdk.json's waits and the cluster's delays (pod shutdown,
#: node boot) divided by this. At 60 the default scenario takes a few seconds after synthesis.
DEFAULT_SPEED = 60.0
MIN_SPEED = 1.0
MAX_SPEED = 1000.0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run the whole pipeline locally (simulated cluster, moto, real exporter) and watch a node heal",
        description=(
            "Run NodeHeal end to end on this machine, with nothing to install by hand: a simulated EKS "
            "GPU cluster behind a fake API server, the real exporter, and the synthesized stack in moto "
            "executing the real Lambda handlers. Prints a live timeline, the remediation history and a "
            "summary; exits 1 when the scenario's expected outcome did not happen."
        ),
    )
    parser.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        metavar="NAME",
        help=f"scenario to play (default {DEFAULT_SCENARIO}; see --list)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        help=(
            "how many times faster than real life the waits run: workflow waits from cdk.json and the "
            f"cluster's delays are divided by it ({MIN_SPEED:g} = production timings; "
            f"default {DEFAULT_SPEED:g})"
        ),
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help=(
            "cdk.json to run with (default: ./cdk.json, else the built-in defaults); the demo forces "
            "mode full, the simulated cluster and the scaled waits, and prints every setting it changes"
        ),
    )
    parser.add_argument("--verbose", action="store_true", help="also print the handlers' and exporter's logs")
    parser.add_argument(
        "--json",
        action="store_true",
        help=(
            "print the outcome as one JSON document on stdout (scenario, changed settings, executions, "
            "ledger records, notifications, problems); the live timeline goes to stderr"
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require_extra("demo", "demo")
    from nodeheal.sim.local_pipeline.scenarios.scenario_index import SCENARIOS

    # With --json the story a person watches goes to stderr, so stdout carries one JSON document.
    out: TextIO = sys.stderr if args.json else sys.stdout
    # Held before the handlers' stdout is silenced below.
    document_out: TextIO | None = sys.stdout if args.json else None
    if args.list:
        if args.json:
            print_json([{"name": name, "title": scenario.title} for name, scenario in SCENARIOS.items()])
            return 0
        width = max(len(name) for name in SCENARIOS)
        for name, scenario in SCENARIOS.items():
            out.write(f"  {name:<{width}}  {scenario.title}\n")
        return 0
    if args.scenario not in SCENARIOS:
        raise ConfigurationError(f"unknown scenario {args.scenario!r}; one of: {', '.join(SCENARIOS)}")
    if not MIN_SPEED <= args.speed <= MAX_SPEED:
        raise ConfigurationError(
            f"--speed must be between {MIN_SPEED:g} and {MAX_SPEED:g}, got {args.speed:g}"
        )
    _prepare_process(verbose=args.verbose)
    config_path, configured = demo_settings(args.config)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        return _play(args.scenario, args.speed, config_path, configured, out, document_out=document_out)
    # The handlers print their EMF metrics and logs to stdout (CloudWatch collects them when
    # deployed), and moto and the exporter log every injected failure; here they would bury the
    # timeline, which writes to the saved stream instead.
    with (
        Path(os.devnull).open("w", encoding="utf-8") as sink,
        contextlib.redirect_stdout(sink),
        _quiet_logging(),
    ):
        return _play(args.scenario, args.speed, config_path, configured, out, document_out=document_out)


def demo_settings(path: str | None) -> tuple[str, dict[str, Any]]:
    """Where the demo's settings come from (what its header prints), and cdk.json's ``nodeheal``
    object; the built-in defaults need only a cluster, which the demo replaces by its own anyway."""
    from nodeheal.sim.stack.context import CLUSTER

    source = config_source(path)
    return source.description, source.context if source.context is not None else {"clusters": [CLUSTER]}


@contextlib.contextmanager
def _quiet_logging() -> Iterator[None]:
    loggers = [logging.getLogger(), logging.getLogger("moto")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _prepare_process(*, verbose: bool) -> None:
    """Quiet, offline, and able to import the stack and the handlers."""
    quiet_jsii()
    if not verbose:
        # The handlers' JSON logs and EMF metrics would bury the timeline (they are what CloudWatch
        # shows when deployed); --verbose brings them back.
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        warnings.filterwarnings("ignore", category=UserWarning)
    make_sources_importable()


def checkout_root() -> Path:
    """The source checkout this package runs from (where ``stacks/``, ``lambdas/`` and cdk.json are)."""
    return Path(__file__).resolve().parents[2]


def make_sources_importable() -> None:
    """The demo and the simulation synthesize ``stacks/`` and run ``lambdas/``: both live next to
    the package in the source checkout and are not installed with it."""
    if importlib.util.find_spec("stacks") is not None and importlib.util.find_spec("lambdas") is not None:
        return
    root = checkout_root()
    if _is_checkout(root):
        sys.path.insert(0, str(root))
        return
    raise ConfigurationError(_needs_editable_install(Path.cwd()))


def _needs_editable_install(cwd: Path) -> str:
    """Why the sources are missing (nodeheal was installed from a built package, which carries
    neither ``stacks/`` nor ``lambdas/``) and what to do, told apart by whether ``cwd`` is in a
    checkout: there, the person is where they should be and lacks only an editable install."""
    package = Path(__file__).resolve().parents[1]
    checkout = next((d for d in (cwd, *cwd.parents) if _is_checkout(d)), None)
    if checkout is not None:
        return (
            f"nodeheal is installed from a built package ({package}), not from this checkout "
            f"({checkout}), and a built package carries neither stacks/ nor lambdas/: in {checkout}, "
            "install it editable with `pip install -e '.[demo]'` (`make demo` does, into .venv)"
        )
    return (
        f"nodeheal is installed from a built package ({package}), which carries neither stacks/ nor "
        "lambdas/: this command runs them from NodeHeal's source checkout. In a clone of the "
        "repository, install it editable with `pip install -e '.[demo]'` (`make demo` does, into "
        ".venv) and run it there"
    )


def _is_checkout(directory: Path) -> bool:
    return (
        (directory / "stacks" / "nodeheal_stack.py").is_file()
        and (directory / "lambdas").is_dir()
        and (directory / "nodeheal" / "__init__.py").is_file()
    )


def _play(
    name: str,
    speed: float,
    config_path: Path | str,
    configured: dict[str, Any],
    out: TextIO,
    *,
    document_out: TextIO | None = None,
) -> int:
    from nodeheal.sim.local_pipeline.scenarios.scenario_index import SCENARIOS
    from nodeheal.sim.local_pipeline.wiring import LocalPipeline
    from nodeheal.sim.stack.context import demo_context
    from nodeheal.sim.stack.process_templates import TEMPLATES
    from nodeheal.sim.timeline import TimelinePrinter, history_table

    scenario = SCENARIOS[name]
    started = time.monotonic()
    context, overrides = demo_context(configured, speed, scenario=name, scenario_context=scenario.context)
    out.write(f"NodeHeal local demo - scenario {name}: {scenario.title}\n")
    out.write(f"settings: {config_path}, except what the demo changes:\n")
    out.write(_overrides_table(overrides) + "\n")
    out.write(f"speed {speed:g}x: the cluster's delays are divided by {speed:g} too\n\n")
    out.write("synthesizing the CDK stack ... ")
    out.flush()
    app = TEMPLATES.get(context)
    out.write(f"{len(app.template.get('Resources', {}))} resources in {time.monotonic() - started:.1f}s\n")
    with LocalPipeline(app, layout=scenario.layout, speed=speed, read_notifications=True) as pipeline:
        _describe_setup(pipeline, out)
        pipeline.timeline.subscribe(TimelinePrinter(pipeline.timeline, out))
        out.write("\ntimeline (seconds since the fault, who, the node and EC2 instance it is about, what):\n")
        # At low speeds every wait takes longer in wall-clock time: so may the scenario.
        with tempfile.TemporaryDirectory(prefix="nodeheal-demo-") as directory:
            run = scenario.run(
                pipeline,
                settle_timeout=max(60.0, 60.0 * DEFAULT_SPEED / speed),
                patience=max(1.0, DEFAULT_SPEED / speed),
                operator=CliOperator(pipeline, Path(directory)),
            )
        records = pipeline.records()
        if run.expected:
            out.write(f"\n{run.expected}\n")
        out.write("\nremediation history (ledger):\n")
        out.write(_indent(history_table(records)) + "\n\n")
        out.write(notification_section(pipeline, run.subject) + "\n\n")
        out.write(_summary(pipeline, run.subject, records, time.monotonic() - started) + "\n")
        if document_out is not None:
            # The stream run() held before it silenced the handlers' stdout.
            document = demo_document(
                name, speed, config_path, overrides, pipeline, run, records, time.monotonic() - started
            )
            document_out.write(json.dumps(document, indent=2, default=str) + "\n")
            document_out.flush()
    if run.problems:
        sys.stderr.write(f"nodeheal demo: scenario {name} did not end as expected:\n")
        for problem in run.problems:
            sys.stderr.write(f"  - {problem}\n")
        return 1
    return 0


class CliOperator:
    """A person at a terminal during a scenario: runs the real ``nodeheal`` commands against the
    local pipeline, through a kubeconfig of the fake API server's administrator, and reads their
    JSON (:class:`nodeheal.sim.local_pipeline.scenarios.play.Operator`). The simulation does not
    import the CLI, so the demo and the tests hand it one."""

    def __init__(self, pipeline: Any, directory: Path) -> None:
        self._pipeline = pipeline
        self._kubeconfig = pipeline.write_admin_kubeconfig(directory / "kubeconfig")

    def breaker_reset(self, cluster: str) -> dict[str, Any]:
        """``nodeheal breaker reset --cluster CLUSTER --yes --json``: what it printed."""
        from nodeheal.commands import breaker

        aws = self._pipeline.aws
        parser = argparse.ArgumentParser(prog="nodeheal")
        breaker.register(parser.add_subparsers())
        args = parser.parse_args(
            [
                "breaker",
                "reset",
                "--cluster",
                cluster,
                "--yes",
                "--json",
                "--region",
                aws.region,
                "--table",
                aws.table_name,
                "--state-machine",
                aws.state_machine_arn,
                "--kubeconfig",
                str(self._kubeconfig),
            ]
        )
        printed = io.StringIO()
        # moto is not thread-safe: the command takes its turn between the handlers' invocations.
        with aws.between_invocations(), contextlib.redirect_stdout(printed):
            code = args.func(args)
        if code != 0:
            raise RuntimeError(f"nodeheal breaker reset exited {code}: {printed.getvalue()[-500:]}")
        document: dict[str, Any] = json.loads(printed.getvalue())
        return document


def demo_document(
    name: str,
    speed: float,
    config_path: Path | str,
    overrides: list[Any],
    pipeline: Any,
    run: Any,
    records: list[Any],
    wall_seconds: float,
) -> dict[str, Any]:
    """What ``--json`` prints: the run as data, with the same facts the human summary gives."""
    from nodeheal.commands.history import record_json
    from nodeheal.sim.local_pipeline.scenarios.scenario_index import SCENARIOS

    region = pipeline.aws.region
    timeline = pipeline.timeline
    healed = timeline.events("workload-running")
    mine = _about(records, run.subject)
    return {
        "scenario": name,
        "title": SCENARIOS[name].title,
        "ok": not run.problems,
        "problems": list(run.problems),
        "speed": speed,
        "config": str(config_path),
        "settingsChanged": [
            {"path": o.path, "configured": o.configured, "used": o.used, "why": o.why} for o in overrides
        ],
        "cluster": pipeline.cluster_name,
        "subject": run.subject,
        "outcome": mine[-1].outcome.value if mine else None,
        "expected": run.expected,
        "stageSeconds": {k: round(v, 3) for k, v in mine[-1].stage_seconds.items()} if mine else {},
        "workloadRunningAfterSeconds": round(timeline.elapsed(healed[-1]), 3) if healed else None,
        "executions": [
            {"name": e.get("name"), "status": e.get("status"), "executionArn": e.get("executionArn")}
            for e in pipeline.executions()
        ],
        "records": [record_json(record, region) for record in records],
        "notifications": [
            {"subject": n.subject, "attributes": dict(n.attributes), "message": n.message}
            for n in pipeline.notifications
        ],
        "wallSeconds": round(wall_seconds, 1),
    }


def _overrides_table(overrides: list[Any]) -> str:
    """One line per changed setting: key, cdk.json's value, the demo's, and why."""
    rows = [(o.path, _shown(o.configured), _shown(o.used), o.why) for o in overrides]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
    return "\n".join(
        f"  {path:<{widths[0]}}  {configured:>{widths[1]}} -> {used:<{widths[2]}}  ({why})"
        for path, configured, used, why in rows
    )


def _shown(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _describe_setup(pipeline: Any, out: TextIO) -> None:
    from nodeheal.sim.cluster.simulated_cluster import NOTEBOOK_SET
    from nodeheal.sim.cluster.workload import TRAINING_JOB

    cluster = pipeline.cluster
    layout = cluster.layout
    aws = pipeline.aws
    out.write(
        f"cluster {pipeline.cluster_name} (fake API server {pipeline.server.url}):\n"
        f"  {layout.gpu_nodes} x {layout.instance_type} GPU nodes, Karpenter pool {layout.node_pool}, "
        f"{layout.gpus_per_node} GPUs each, {layout.zone}; 1 system node\n"
        f"  Job {TRAINING_JOB}: {layout.workers} workers x {layout.gpus_per_node} GPUs, PDB maxUnavailable 1"
    )
    if layout.notebook_gpus:
        out.write(f"; StatefulSet {NOTEBOOK_SET}: karpenter.sh/do-not-disrupt, {layout.notebook_gpus} GPUs")
    out.write("; DaemonSets aws-node, kube-proxy, nvidia-device-plugin, dcgm-exporter\n")
    out.write(
        f"AWS (moto): bus {aws.event_bus_name} + rule {', '.join(aws.rule_probes)}, state machine "
        f"{aws.state_machine_arn.rsplit(':', 1)[-1]}, ledger {aws.table_name}, "
        f"topic {aws.topic_arn.rsplit(':', 1)[-1]}\n"
        f"exporter: watching Nodes, publishing to {aws.event_bus_name} as {pipeline.event_source}\n"
    )


def notification_section(pipeline: Any, subject: str) -> str:
    """The notification about the scenario's node as the topic's subscribers received it from SNS
    (subject, message attributes, body), and how many others the timeline lists."""
    from nodeheal.sim.timeline import short_node

    received = pipeline.notifications
    topic = pipeline.aws.topic_arn.rsplit(":", 1)[-1]
    if not received:
        return f"notifications: none published to topic {topic}"
    about = [n for n in received if n.node == subject] or received
    shown = about[-1]
    attributes = ", ".join(f"{name}={value}" for name, value in sorted(shown.attributes.items()))
    lines = [
        f"notification about {short_node(shown.node) or 'the cluster'}, as a subscriber of topic {topic} "
        "received it:",
        f"  Subject: {shown.subject}",
        f"  Message attributes: {attributes}",
        "",
        *(f"  {line}" for line in shown.message.splitlines()),
    ]
    others = len(received) - 1
    if others:
        lines += ["", f"{others} more notification(s): the timeline's sns lines give their subjects"]
    return "\n".join(lines)


def _about(records: list[Any], subject: str) -> list[Any]:
    """The subject's records, the one that tells its story last: an execution that found the node
    gone (two detectors reporting one fault, one waiting behind the other) did not decide it."""
    mine = [r for r in records if r.node == subject]
    # A stable sort: the skipped ones first, the others in the order they started.
    return sorted(mine, key=lambda r: r.outcome.value != "skipped")


def _summary(pipeline: Any, subject: str, records: list[Any], wall_seconds: float) -> str:
    from nodeheal.sim.local_pipeline.scenarios.play import describe
    from nodeheal.sim.timeline import short_node

    parts = [f"summary: {describe(records)} in {len(pipeline.executions())} execution(s)"]
    mine = _about(records, subject)
    if mine:
        last = mine[-1]
        signal = (
            f"Xid {last.xid}" if last.xid is not None else (last.signal or last.condition.get("type", ""))
        )
        stages = last.stage_seconds
        steps = [
            f"{label} {stages[key]:.1f}s"
            for key, label in (
                ("faultToCordon", "cordoned"),
                ("faultToInstanceAction", "instance action"),
                ("faultToRecorded", "recorded"),
            )
            if key in stages
        ]
        parts.append(
            f"{short_node(subject)} {signal} -> {last.outcome.value}"
            + (f" (ledger, after the fault: {', '.join(steps)})" if steps else "")
        )
    timeline = pipeline.timeline
    healed = timeline.events("workload-running")
    if healed:
        parts.append(f"workload running again at +{timeline.elapsed(healed[-1]):.1f}s")
    parts.append(f"demo took {wall_seconds:.0f}s")
    return "; ".join(parts)
