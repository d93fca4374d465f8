"""The exporter's settings: one typed object, read once at start from flags and environment.

Every setting has a command-line flag and an environment variable (``NODEHEAL_`` + upper-case
name); a flag wins over the environment, the environment over the default. The ConfigMap in
``deploy/exporter`` sets the environment, so a cluster operator never edits the Deployment.
Invalid values stop the process at start with a message naming the setting, never later.
``--help`` shows each flag's type, range and default from the same table that parses it.

The AWS region is resolved here too (:func:`resolve_region`), because the usual fallback does not
work in a pod: see its docstring.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from nodeheal.conditions import KUBELET_PRESSURE_CONDITIONS
from nodeheal.errors import ConfigurationError
from nodeheal.events import DEFAULT_SOURCE, cluster_source

ENV_PREFIX = "NODEHEAL_"
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class ExporterSettings:
    #: Cluster name written into every event; ingest drops events for other clusters.
    cluster_name: str
    #: Name (or ARN) of the EventBridge bus the events go to.
    event_bus: str = "nodeheal"
    #: Prefix of every entry's ``Source``: the exporter sends ``<source>.<cluster_name>``, the only
    #: Source its cluster's IAM role may put on the bus (the stack's ``eventBus.source``).
    source: str = DEFAULT_SOURCE
    #: Condition types to export. Empty means every condition except ``ignored_condition_types``.
    condition_types: tuple[str, ...] = ()
    #: Condition types never exported when ``condition_types`` is empty. The kubelet's pressure
    #: conditions are the scheduler's business and flap with load.
    ignored_condition_types: tuple[str, ...] = tuple(sorted(KUBELET_PRESSURE_CONDITIONS))
    #: Label selector for the Nodes to watch (for example ``nvidia.com/gpu.present=true``).
    label_selector: str = ""
    #: Seconds between re-emissions of every currently-bad condition with ``resync: true``, from
    #: memory (no API call). A safety net for an event dropped by an overflow; 0 disables it.
    resync_seconds: float = 3600.0
    #: Seconds between ``Exporter Heartbeat`` events. The stack alarms when a cluster's heartbeats
    #: stop for ``observability.heartbeatMissingMinutes``, so keep this well below that; 0 disables it.
    heartbeat_seconds: float = 60.0
    #: Server-side watch timeout in seconds: the API server ends the stream after this long and the
    #: exporter resumes from the last resourceVersion. Short enough to notice a stuck stream.
    watch_timeout_seconds: int = 300
    #: Extra seconds the client waits for bytes beyond the server timeout before it declares the
    #: connection dead (a silent half-open TCP connection would otherwise hang forever).
    watch_client_margin_seconds: float = 15.0
    #: Seconds a list, lease or other non-watch request may take.
    request_timeout_seconds: float = 30.0
    #: Nodes per list page. Pages keep memory flat on a 5,000-node cluster of ~15 KB Nodes.
    list_page_size: int = 500
    #: First and largest delay in seconds between retries after a watch or list error.
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    #: Events held in memory between the watch and EventBridge; beyond it the oldest
    #: healthy-direction transitions are dropped first, then Node Events, bad transitions last.
    queue_capacity: int = 10_000
    #: Entries per PutEvents call (EventBridge allows at most 10) and bytes per call (256 KB).
    publish_batch_entries: int = 10
    publish_batch_bytes: int = 256 * 1024
    #: First and largest delay in seconds between PutEvents retries; each delay is jittered.
    publish_backoff_initial_seconds: float = 0.5
    publish_backoff_max_seconds: float = 30.0
    #: Address and port of the /metrics, /healthz and /readyz server.
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    #: /healthz fails when nothing was heard from the API server (event, bookmark, list, stream
    #: end) for this many seconds. Longer than a whole watch cycle plus a backoff.
    liveness_max_api_silence_seconds: float = 600.0
    #: Run leader election so exactly one replica ships; the others watch and stand by.
    leader_election: bool = False
    #: Lease name and namespace (namespace defaults to the pod's own).
    lease_name: str = "nodeheal-exporter"
    lease_namespace: str = "default"
    #: This replica's identity in the Lease (the pod name).
    identity: str = field(default_factory=socket.gethostname)
    #: Seconds a Lease stays valid without renewal; a standby takes over after that.
    lease_duration_seconds: float = 15.0
    #: The leader gives up leadership when it could not renew for this long (< lease duration,
    #: so it stops shipping before anyone else may start).
    renew_deadline_seconds: float = 10.0
    #: Seconds between acquire or renew attempts.
    retry_period_seconds: float = 2.0
    #: A standby remembers the transitions it saw in the last this many seconds and ships them when
    #: it takes over, so one that the dead leader never published is not lost (duplicates are
    #: deduplicated by the workflow).
    standby_replay_seconds: float = 300.0
    #: Also ship Kubernetes Events about Nodes as ``Node Event Observed`` (on by default: the
    #: Warning Events of NPD and the node monitoring agent are what the counts of a degrading GPU
    #: rest on, issue 31). Needs events list/watch, which deploy/exporter grants.
    ship_node_events: bool = True
    #: Event reasons to ship (empty: all); types to ship (empty: all).
    node_event_reasons: tuple[str, ...] = ()
    node_event_types: tuple[str, ...] = ("Warning",)
    #: Kubeconfig file and context when not running in a cluster.
    kubeconfig: str = ""
    kube_context: str = ""
    #: Logging level (DEBUG, INFO, WARNING, ERROR).
    log_level: str = "INFO"
    #: Region of the EventBridge endpoint the events go to; not a flag: ``AWS_REGION`` (or
    #: ``AWS_DEFAULT_REGION``), else the region of ``event_bus`` given as an ARN (:func:`resolve_region`).
    #: ``None`` leaves it to boto3's shared config file.
    aws_region: str | None = None

    def watches(self, condition_type: str) -> bool:
        """Whether transitions of this condition type are exported."""
        if self.condition_types:
            return condition_type in self.condition_types
        return condition_type not in self.ignored_condition_types

    @property
    def entry_source(self) -> str:
        """The ``Source`` of every entry this exporter puts: ``nodeheal.exporter.<cluster>``."""
        return cluster_source(self.source, self.cluster_name)

    @property
    def watch_read_timeout_seconds(self) -> float:
        return self.watch_timeout_seconds + self.watch_client_margin_seconds


@dataclass(frozen=True, slots=True)
class _Parser:
    """How one setting's text becomes a value, and how ``--help`` names its type."""

    #: Shown as the flag's metavar: TEXT, LIST, BOOL, NUMBER, INT or LEVEL.
    metavar: str
    #: The type as ``--help`` spells it, with its range when it has one.
    describe: str
    parse: Callable[[str, str], Any]

    def __call__(self, where: str, raw: str) -> Any:
        return self.parse(where, raw)


@dataclass(frozen=True, slots=True)
class _Option:
    name: str
    parse: _Parser
    help: str


def _parse_string(where: str, raw: str) -> str:
    return raw.strip()


def _parse_required_string(where: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ConfigurationError(f"{where} must not be empty")
    return value


def _parse_csv(where: str, raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _parse_boolean(where: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigurationError(f"{where} must be true or false, got {raw!r}")


def _parse_log_level(where: str, raw: str) -> str:
    value = raw.strip().upper()
    if value not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigurationError(f"{where} must be DEBUG, INFO, WARNING or ERROR, got {raw!r}")
    return value


_string = _Parser("TEXT", "string", _parse_string)
_required_string = _Parser("TEXT", "non-empty string", _parse_required_string)
_csv = _Parser("LIST", "comma-separated list", _parse_csv)
_boolean = _Parser("BOOL", "boolean (true/false)", _parse_boolean)
_log_level = _Parser("LEVEL", "one of DEBUG, INFO, WARNING, ERROR", _parse_log_level)


def _number(minimum: float, maximum: float) -> _Parser:
    def parse(where: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError as exc:
            raise ConfigurationError(f"{where} must be a number, got {raw!r}") from exc
        if not minimum <= value <= maximum:
            raise ConfigurationError(f"{where} must be between {minimum:g} and {maximum:g}, got {raw}")
        return value

    return _Parser("NUMBER", f"number {minimum:g}..{maximum:g}", parse)


def _integer(minimum: int, maximum: int) -> _Parser:
    def parse(where: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError as exc:
            raise ConfigurationError(f"{where} must be an integer, got {raw!r}") from exc
        if not minimum <= value <= maximum:
            raise ConfigurationError(f"{where} must be between {minimum} and {maximum}, got {raw}")
        return value

    return _Parser("INT", f"integer {minimum}..{maximum}", parse)


OPTIONS: tuple[_Option, ...] = (
    _Option("cluster_name", _required_string, "cluster name written into every event"),
    _Option("event_bus", _required_string, "EventBridge bus name or ARN"),
    _Option("source", _required_string, "Source prefix of the entries (sent as <prefix>.<cluster>)"),
    _Option("condition_types", _csv, "condition types to export (empty: all but the ignored ones)"),
    _Option("ignored_condition_types", _csv, "condition types skipped when --condition-types is empty"),
    _Option("label_selector", _string, "label selector for the Nodes to watch (empty: all)"),
    _Option("resync_seconds", _number(0, 86_400), "seconds between re-emissions of bad conditions (0=off)"),
    _Option("heartbeat_seconds", _number(0, 3600), "seconds between Exporter Heartbeat events (0=off)"),
    _Option("watch_timeout_seconds", _integer(1, 3600), "server-side watch timeout"),
    _Option("watch_client_margin_seconds", _number(0.1, 600), "client read timeout beyond the server's"),
    _Option("request_timeout_seconds", _number(0.1, 600), "timeout of list and lease requests"),
    _Option("list_page_size", _integer(1, 10_000), "Nodes per list page"),
    _Option("backoff_initial_seconds", _number(0.001, 600), "first delay after a watch error"),
    _Option("backoff_max_seconds", _number(0.001, 3600), "largest delay after watch errors"),
    _Option("queue_capacity", _integer(10, 10_000_000), "events buffered before overflow drops"),
    _Option("publish_batch_entries", _integer(1, 10), "entries per PutEvents call"),
    _Option("publish_batch_bytes", _integer(1024, 256 * 1024), "bytes per PutEvents call"),
    _Option("publish_backoff_initial_seconds", _number(0.001, 600), "first delay between PutEvents retries"),
    _Option("publish_backoff_max_seconds", _number(0.001, 3600), "largest delay between PutEvents retries"),
    _Option("http_host", _required_string, "bind address of the metrics/health server"),
    _Option("http_port", _integer(0, 65_535), "port of the metrics/health server (0: any free port)"),
    _Option("liveness_max_api_silence_seconds", _number(1, 86_400), "API silence that fails /healthz"),
    _Option("leader_election", _boolean, "elect a leader through a Lease so exactly one replica ships"),
    _Option("lease_name", _required_string, "Lease name"),
    _Option("lease_namespace", _required_string, "Lease namespace"),
    _Option("identity", _required_string, "holder identity in the Lease"),
    _Option("lease_duration_seconds", _number(0.1, 3600), "seconds a Lease is valid without renewal"),
    _Option("renew_deadline_seconds", _number(0.05, 3600), "leader steps down after failing to renew"),
    _Option("retry_period_seconds", _number(0.01, 600), "seconds between acquire/renew attempts"),
    _Option("standby_replay_seconds", _number(0, 86_400), "transitions a standby replays on takeover"),
    _Option("ship_node_events", _boolean, "also ship Kubernetes Events about Nodes (false: off)"),
    _Option("node_event_reasons", _csv, "Event reasons to ship (empty: all)"),
    _Option("node_event_types", _csv, "Event types to ship (empty: all)"),
    _Option("kubeconfig", _string, "kubeconfig file when not in a cluster"),
    _Option("kube_context", _string, "kubeconfig context (empty: the current one)"),
    _Option("log_level", _log_level, "logging level"),
)


#: Defaults decided at start rather than in the dataclass, as ``--help`` and the README name them.
_START_DEFAULTS = {
    "cluster_name": "required",
    "lease_namespace": "the pod's namespace",
    "identity": "$POD_NAME, else the hostname",
    "kubeconfig": "$KUBECONFIG, else in-cluster",
}

#: How the region is found, for ``--help`` (the rule is :func:`resolve_region`).
REGION_HELP = (
    "AWS region: AWS_REGION, else AWS_DEFAULT_REGION, else the region of --event-bus when it is an "
    "ARN (arn:aws:events:<region>:<account>:event-bus/<name>). Set one of them: boto3 does not ask "
    "the instance metadata service, which pods often cannot reach anyway."
)


def env_name(option_name: str) -> str:
    return ENV_PREFIX + option_name.upper()


def flag_name(option_name: str) -> str:
    return "--" + option_name.replace("_", "-")


def field_default(name: str) -> Any:
    """The dataclass default of a setting (a slots dataclass keeps no class attribute for it)."""
    (spec,) = [f for f in fields(ExporterSettings) if f.name == name]
    if spec.default is not MISSING:
        return spec.default
    return spec.default_factory()  # type: ignore[misc]


def default_text(option_name: str) -> str:
    """The default of a setting as ``--help`` and ``deploy/exporter/README.md`` show it."""
    if option_name in _START_DEFAULTS:
        return _START_DEFAULTS[option_name]
    value = field_default(option_name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        value = ",".join(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "(empty)"


def type_text(option_name: str) -> str:
    """The type (and range) of a setting as ``--help`` shows it."""
    (option,) = [o for o in OPTIONS if o.name == option_name]
    return option.parse.describe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; ``None`` as the default marks "not given" so the environment applies."""
    for option in OPTIONS:
        parser.add_argument(
            flag_name(option.name),
            dest=option.name,
            default=None,
            metavar=option.parse.metavar,
            help=(
                f"{option.help} [{option.parse.describe}; default: {default_text(option.name)}; "
                f"env {env_name(option.name)}]"
            ),
        )
    parser.epilog = REGION_HELP


def _pod_namespace() -> str:
    try:
        return _SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"


def load_settings(
    flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> ExporterSettings:
    """Settings from flags (strings, ``None`` = not given) over environment over defaults."""
    flags = flags or {}
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw = flags.get(option.name)
        where = flag_name(option.name)
        if raw is None:
            raw = env.get(env_name(option.name))
            where = env_name(option.name)
        if raw is None:
            continue
        values[option.name] = option.parse(where, str(raw))
    if "cluster_name" not in values:
        raise ConfigurationError(
            f"the cluster name is required: {flag_name('cluster_name')} or {env_name('cluster_name')}"
        )
    values.setdefault("lease_namespace", env.get("POD_NAMESPACE") or _pod_namespace())
    if "identity" not in values and env.get("POD_NAME"):
        values["identity"] = env["POD_NAME"]
    if "kubeconfig" not in values and env.get("KUBECONFIG"):
        values["kubeconfig"] = env["KUBECONFIG"]
    values["aws_region"] = resolve_region(values.get("event_bus", field_default("event_bus")), env)
    settings = ExporterSettings(**values)
    _check(settings)
    return settings


def _check(settings: ExporterSettings) -> None:
    if settings.source.startswith("aws."):
        raise ConfigurationError(f"{flag_name('source')} must not start with 'aws.' (reserved by AWS)")
    if settings.backoff_initial_seconds > settings.backoff_max_seconds:
        raise ConfigurationError("backoff_initial_seconds must not exceed backoff_max_seconds")
    if settings.publish_backoff_initial_seconds > settings.publish_backoff_max_seconds:
        raise ConfigurationError(
            "publish_backoff_initial_seconds must not exceed publish_backoff_max_seconds"
        )
    if settings.leader_election and not (
        settings.retry_period_seconds < settings.renew_deadline_seconds < settings.lease_duration_seconds
    ):
        raise ConfigurationError(
            "leader election needs retry_period_seconds < renew_deadline_seconds < lease_duration_seconds "
            "so a leader steps down before its Lease can be taken over"
        )
    if settings.liveness_max_api_silence_seconds <= settings.watch_read_timeout_seconds:
        raise ConfigurationError(
            "liveness_max_api_silence_seconds must exceed watch_timeout_seconds + "
            "watch_client_margin_seconds, or a quiet cluster would fail its liveness probe"
        )


#: ``arn:<partition>:events:<region>:<account>:event-bus/<name>`` (EventBridge's ARN format; the
#: stack's ``EventBusArn`` output has this shape).
_BUS_ARN = re.compile(
    r"^arn:aws[a-z-]*:events:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+):\d{12}:event-bus/[A-Za-z0-9._/-]+$"
)


def bus_region(event_bus: str) -> str | None:
    """The region of a bus given as an ARN; ``None`` for a bus given by name.

    Raises ConfigurationError for an ARN that is not an EventBridge bus ARN, rather than sending
    PutEvents to a bus name that can never exist.
    """
    if not event_bus.startswith("arn:"):
        return None
    match = _BUS_ARN.match(event_bus)
    if match is None:
        raise ConfigurationError(
            f"{flag_name('event_bus')} {event_bus!r} is not an EventBridge bus ARN "
            "(arn:aws:events:<region>:<account>:event-bus/<name>)"
        )
    return match.group("region")


def resolve_region(event_bus: str, env: Mapping[str, str]) -> str | None:
    """The region of the EventBridge endpoint: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else the
    bus ARN's region; ``None`` when none says (boto3's shared config file may still).

    Why the exporter resolves it and passes it to boto3 explicitly:

    * boto3 reads ``AWS_DEFAULT_REGION`` and the config file, not ``AWS_REGION`` (botocore 1.44,
      ``configprovider.BOTOCORE_DEFAUT_SESSION_VARIABLES['region']``), yet ``AWS_REGION`` is what
      the other SDKs, Lambda and the EKS pod identity webhook set; the exporter honours both.
    * boto3 asks the instance metadata service for a region only in its ``auto`` defaults mode,
      and a pod often cannot reach IMDS at all: ``deploy/karpenter``'s EC2NodeClass sets
      ``httpPutResponseHopLimit: 1``, and the IMDSv2 token response does not survive the extra hop
      into a pod network namespace.
    * PutEvents must go to the bus's own region: another region's bus is reached only through a
      rule on a local bus (EventBridge user guide, "Sending and receiving events between AWS
      Regions"). So an explicit region that contradicts the bus ARN is refused at start.
    """
    from_arn = bus_region(event_bus)
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        explicit = (env.get(variable) or "").strip()
        if not explicit:
            continue
        if from_arn is not None and explicit != from_arn:
            raise ConfigurationError(
                f"{variable}={explicit} but the event bus {event_bus} is in {from_arn}: PutEvents "
                "must go to the bus's own region; unset it or correct it"
            )
        return explicit
    return from_arn
