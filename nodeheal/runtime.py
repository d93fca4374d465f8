"""The adapters a Lambda container uses, built once per container from its validated environment.

Handlers call :func:`runtime` and pass what they need into the domain functions; the domain never
reads ``os.environ`` or creates a client. Adapters are built lazily (first use), so a function
that never talks to Kubernetes never imports the kubernetes client or calls eks:DescribeCluster.
The local simulation and the workflow tests install a runtime pointed at moto and the fake API
server with :func:`install_runtime`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeheal.actions import Mode
from nodeheal.config import PolicySettings
from nodeheal.deadline import Deadline
from nodeheal.deadline import current as current_deadline
from nodeheal.errors import ConfigurationError, DeadlineExceededError, DuplicateExecutionError
from nodeheal.events import DEFAULT_SOURCE
from nodeheal.kube_event_body import EventTally
from nodeheal.settings_reader import SettingsReader
from nodeheal.timestamps import utc_now
from nodeheal.workflow.ports import KubeAccess

if TYPE_CHECKING:
    from nodeheal.aws.ec2 import Ec2Instances
    from nodeheal.aws.executions import StepFunctionsExecutions
    from nodeheal.aws.ledger import Ledger
    from nodeheal.aws.notify import SnsNotifier
    from nodeheal.kube.client import KubeClientProvider
    from nodeheal.workflow.ingest import IngestSettings


#: The variable that carries ``policy.countedSignals`` to the counting function, as JSON.
COUNTED_SIGNALS_VARIABLE = "NODEHEAL_COUNTED_SIGNALS"


def counting_policy(raw: str) -> PolicySettings:
    """The policy of ``NODEHEAL_COUNTED_SIGNALS`` (empty: every signal's default rule), checked as
    cdk.json's ``policy.countedSignals`` is: a value the deployment would have refused stops the
    container at its first invocation with the key's path, rather than counting by a rule nobody set."""
    if not raw.strip():
        return PolicySettings()
    try:
        rules = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{COUNTED_SIGNALS_VARIABLE} is not JSON: {exc}") from exc
    try:
        return PolicySettings.read(SettingsReader({"countedSignals": rules}, "policy"))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{COUNTED_SIGNALS_VARIABLE}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class LambdaEnvironment:
    """The environment variables the stack sets, validated once at cold start."""

    region: str
    ledger_table: str = ""
    topic_arn: str = ""
    state_machine_arn: str = ""
    clusters: frozenset[str] = field(default_factory=frozenset)
    stale_event_seconds: int = 900
    event_source: str = DEFAULT_SOURCE
    #: The deployed mode (``NODEHEAL_MODE``), read by every mutating step (D4): a redeploy in
    #: dry-run stops executions already in flight. None where the stack sets no mode.
    mode: Mode | None = None
    #: The finalizer's sweeper: how far back it looks for executions that ended uncaught, and the
    #: workflow timeout (no execution runs longer, so the listing pages back no further).
    sweep_look_back_seconds: int = 86_400
    longest_execution_seconds: int = 3 * 3600
    #: The counting function's policy (``NODEHEAL_COUNTED_SIGNALS``): the deployment's
    #: ``policy.countedSignals``, the rules that differ from the defaults. The state machine's steps
    #: read theirs from the settings each execution carries (Load settings); the counting function
    #: runs outside it, so the stack gives it these in its environment.
    counting_policy: PolicySettings = field(default_factory=PolicySettings)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> LambdaEnvironment:
        region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or ""
        if not region:
            raise ConfigurationError("AWS_REGION is not set")
        numbers = {}
        for variable, default in (
            ("NODEHEAL_STALE_EVENT_SECONDS", "900"),
            ("NODEHEAL_SWEEP_LOOK_BACK_SECONDS", "86400"),
            ("NODEHEAL_LONGEST_EXECUTION_SECONDS", "10800"),
        ):
            raw = environ.get(variable, default)
            if not raw.isdigit():
                raise ConfigurationError(f"{variable} must be a number of seconds, got {raw!r}")
            numbers[variable] = int(raw)
        mode_raw = environ.get("NODEHEAL_MODE", "")
        allowed_modes = [m.value for m in Mode]
        if mode_raw and mode_raw not in allowed_modes:
            raise ConfigurationError(
                f"NODEHEAL_MODE must be one of {', '.join(allowed_modes)}; got {mode_raw!r}"
            )
        return cls(
            region=region,
            ledger_table=environ.get("NODEHEAL_LEDGER_TABLE", ""),
            topic_arn=environ.get("NODEHEAL_TOPIC_ARN", ""),
            state_machine_arn=environ.get("NODEHEAL_STATE_MACHINE_ARN", ""),
            clusters=frozenset(
                c.strip() for c in environ.get("NODEHEAL_CLUSTERS", "").split(",") if c.strip()
            ),
            stale_event_seconds=numbers["NODEHEAL_STALE_EVENT_SECONDS"],
            event_source=environ.get("NODEHEAL_EVENT_SOURCE", DEFAULT_SOURCE),
            mode=Mode(mode_raw) if mode_raw else None,
            sweep_look_back_seconds=numbers["NODEHEAL_SWEEP_LOOK_BACK_SECONDS"],
            longest_execution_seconds=numbers["NODEHEAL_LONGEST_EXECUTION_SECONDS"],
            counting_policy=counting_policy(environ.get(COUNTED_SIGNALS_VARIABLE, "")),
        )

    def require(self, name: str, value: str) -> str:
        if not value:
            raise ConfigurationError(f"{name} is not set in this function's environment")
        return value


class SfnExecutionStarter:
    """Starts named executions; an existing name means the event is a duplicate."""

    def __init__(self, sfn_client: Any, state_machine_arn: str) -> None:
        self._client = sfn_client
        self._arn = state_machine_arn

    def start(self, name: str, payload: Mapping[str, Any]) -> str:
        try:
            response = self._client.start_execution(
                stateMachineArn=self._arn, name=name, input=json.dumps(payload, separators=(",", ":"))
            )
        except self._client.exceptions.ExecutionAlreadyExists as exists:
            raise DuplicateExecutionError(name) from exists
        return str(response["executionArn"])


class Runtime:
    def __init__(
        self,
        environment: LambdaEnvironment,
        *,
        client_factory: Callable[[str], Any],
        kube_provider_factory: Callable[[], KubeClientProvider] | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.environment = environment
        self._client_factory = client_factory
        self._kube_provider_factory = kube_provider_factory
        self._clock = clock
        self._lock = threading.Lock()
        #: What became of the Kubernetes Events this container's invocations wrote; the handler
        #: takes it after each invocation for its metrics (nodeheal.lambda_support).
        self.event_tally = EventTally()

    def now(self) -> datetime:
        return self._clock()

    def mode(self, started_with: Mode) -> Mode:
        """The live mode: the function's environment, else the mode the execution started with."""
        return self.environment.mode or started_with

    @cached_property
    def ledger(self) -> Ledger:
        from nodeheal.aws.ledger import Ledger

        table = self.environment.require("NODEHEAL_LEDGER_TABLE", self.environment.ledger_table)
        return Ledger(self._client_factory("dynamodb"), table, clock=self._clock)

    @cached_property
    def notifier(self) -> SnsNotifier | None:
        from nodeheal.aws.notify import SnsNotifier

        if not self.environment.topic_arn:
            return None
        return SnsNotifier(self._client_factory("sns"), self.environment.topic_arn)

    @cached_property
    def instances(self) -> Ec2Instances:
        from nodeheal.aws.ec2 import Ec2Instances

        return Ec2Instances(self._client_factory("ec2"))

    @cached_property
    def executions(self) -> StepFunctionsExecutions:
        from nodeheal.aws.executions import StepFunctionsExecutions

        arn = self.environment.require("NODEHEAL_STATE_MACHINE_ARN", self.environment.state_machine_arn)
        return StepFunctionsExecutions(self._client_factory("stepfunctions"), arn)

    @cached_property
    def starter(self) -> SfnExecutionStarter:
        arn = self.environment.require("NODEHEAL_STATE_MACHINE_ARN", self.environment.state_machine_arn)
        return SfnExecutionStarter(self._client_factory("stepfunctions"), arn)

    @cached_property
    def ingest_settings(self) -> IngestSettings:
        from nodeheal.workflow.ingest import IngestSettings

        if not self.environment.clusters:
            raise ConfigurationError("NODEHEAL_CLUSTERS is empty: no cluster would ever be accepted")
        return IngestSettings(
            clusters=self.environment.clusters,
            stale_after=timedelta(seconds=self.environment.stale_event_seconds),
            event_source=self.environment.event_source,
        )

    def kube(self, cluster: str, deadline: Deadline) -> KubeAccess:
        """Kubernetes adapters for one invocation: the container's connection pool to ``cluster``
        (kept across invocations), every request bounded by this invocation's ``deadline``. Events
        go over the same pool, so the function that acted is the identity that tells it (D8)."""
        from nodeheal.kube.event_writer import EventOperations
        from nodeheal.kube.nodeclaims import NodeClaimOperations
        from nodeheal.kube.nodes import NodeOperations
        from nodeheal.kube.pods import PodOperations

        with self._lock:
            provider = self._kube_provider
        transport = provider.transport(cluster)
        return KubeAccess(
            nodes=NodeOperations(transport, deadline=deadline),
            pods=PodOperations(transport, deadline=deadline),
            events=EventOperations(transport, deadline=deadline, tally=self.event_tally),
            nodeclaims=NodeClaimOperations(transport, deadline=deadline),
        )

    @cached_property
    def _kube_provider(self) -> KubeClientProvider:
        if self._kube_provider_factory is not None:
            return self._kube_provider_factory()
        import botocore.session

        from nodeheal.kube.client import EksClientProvider

        # The token is signed with this container's credentials (the function's role), resolved
        # by botocore's usual chain and refreshed by it.
        return EksClientProvider(
            self._client_factory("eks"),
            botocore.session.get_session(),
            self._clock,
            region=self.environment.region,
        )


#: Seconds one AWS API attempt may take: connecting, then waiting for the answer. DynamoDB answers
#: single-item calls in milliseconds and EC2 its Describe/Reboot/Terminate calls in well under a
#: second; botocore's defaults (60 s each) would outlast every NodeHeal function.
AWS_CONNECT_TIMEOUT_SECONDS = 2
AWS_READ_TIMEOUT_SECONDS = 5
#: Attempts per AWS call, first included (botocore "standard" mode: throttling, 5xx and connection
#: errors are retried after a jittered pause of at most 1 s, then 2 s).
AWS_MAX_ATTEMPTS = 3


def _refuse_attempt_past_deadline(request: Any, **_: Any) -> None:
    """botocore ``before-send`` hook: an attempt (first or retry) starts only if it can finish
    before the invocation's deadline, so botocore's retries stop there instead of Lambda's kill."""
    deadline = current_deadline()
    if not deadline.allows(AWS_CONNECT_TIMEOUT_SECONDS + AWS_READ_TIMEOUT_SECONDS):
        raise DeadlineExceededError(
            f"{request.method} {request.url}: not sent, {max(deadline.remaining(), 0.0):.1f}s of this "
            f"invocation's time left and an AWS attempt may take "
            f"{AWS_CONNECT_TIMEOUT_SECONDS + AWS_READ_TIMEOUT_SECONDS}s"
        )


def aws_client_factory(region: str, models: Path | None = None) -> Callable[[str], Any]:
    """Clients with NodeHeal's timeouts, retries and deadline hook. ``models``: a directory of
    trimmed service models searched before botocore's own (nodeheal.aws.service_models); by
    default the Lambda asset's, when this runs from one.

    The clients are botocore's, made without boto3: a boto3 client is this very object, but
    importing boto3 imports s3transfer too, more than 100 ms of every cold start for nothing
    NodeHeal calls (boto3's session adds only S3 and resource-API handlers)."""
    import botocore.session
    from botocore.config import Config

    from nodeheal.aws.service_models import bundled_models_directory

    models = models or bundled_models_directory(Path(__file__).resolve().parents[1])
    session = botocore.session.get_session()
    if models is not None:
        # Before the first client: the session builds its model loader from this on first use.
        searched = [str(models), session.get_config_variable("data_path")]
        session.set_config_variable("data_path", os.pathsep.join(path for path in searched if path))
    config = Config(
        connect_timeout=AWS_CONNECT_TIMEOUT_SECONDS,
        read_timeout=AWS_READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "total_max_attempts": AWS_MAX_ATTEMPTS},
        user_agent_appid="nodeheal",
    )
    lock = threading.Lock()

    def client(service: str) -> Any:
        # A botocore session is not safe to share between threads while it builds clients (the
        # local pipeline runs functions on several); the clients themselves are.
        with lock:
            built = session.create_client(service, region_name=region, config=config)
        built.meta.events.register("before-send", _refuse_attempt_past_deadline)
        return built

    return client


_installed: Runtime | None = None
_install_lock = threading.Lock()
#: Per-invocation override: the local pipeline runs every function in one process, each with the
#: environment the stack gives that function, possibly on several threads at once.
_current: ContextVar[Runtime | None] = ContextVar("nodeheal_runtime", default=None)


def runtime() -> Runtime:
    """This container's runtime, built from the environment on first use."""
    global _installed  # noqa: PLW0603 - one runtime per Lambda container is the point
    current = _current.get()
    if current is not None:
        return current
    with _install_lock:
        if _installed is None:
            environment = LambdaEnvironment.from_environ(os.environ)
            _installed = Runtime(environment, client_factory=aws_client_factory(environment.region))
        return _installed


def install_runtime(value: Runtime | None) -> None:
    """Use ``value`` for this process (the local simulation, tests); None rebuilds from the environment."""
    global _installed  # noqa: PLW0603
    with _install_lock:
        _installed = value


@contextmanager
def using_runtime(value: Runtime) -> Iterator[Runtime]:
    """Run the enclosed handler call with ``value`` (this thread/context only)."""
    token = _current.set(value)
    try:
        yield value
    finally:
        _current.reset(token)
