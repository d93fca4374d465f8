"""NodeHeal's AWS side on one machine: moto, built from the synthesized CloudFormation template.

Nothing here re-describes the stack. The ledger table is created from the template's table
properties, the state machine from the template's definition (CloudFormation intrinsics resolved
to the moto resources), and each Lambda task is dispatched in-process to the handler the template
names, with the environment the template gives that function. So a wiring mistake in the stack
(a missing environment variable, a wrong handler string, a state reading the wrong key) fails
here exactly as it would in a real account.

moto executes the ASL (``stepfunctions.execute_state_machine``) in background threads and calls
Lambda through its simple backend, whose ``invoke`` is replaced by the in-process dispatcher. A
handler's exception becomes an ``Unhandled`` function error whose ``errorType`` is the exception's
class name, as in AWS, so Retry/Catch on domain error names behaves as deployed. A task result or
a state over 256 KiB fails the execution with ``States.DataLimitExceeded``, which no Catch catches,
as in AWS (:func:`nodeheal.sim.moto_patches.patch_terminal_data_limit`). What else the harness
changes in moto, and for which version, is in :mod:`nodeheal.sim.moto_patches`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from unittest import mock

import boto3

from nodeheal.kube.client import KubeClientProvider
from nodeheal.runtime import LambdaEnvironment, Runtime, using_runtime
from nodeheal.sim import moto_patches
from nodeheal.sim.capacity import CapacityModel
from nodeheal.sim.stack.rule_targets import RuleTargetPump
from nodeheal.sim.stack.synthesized_app import (
    ACCOUNT_ID,
    FunctionSpec,
    Resolver,
    SynthesizedApp,
    TemplateError,
)
from nodeheal.timestamps import format_timestamp, utc_now

MOTO_CONFIG: Any = {
    "stepfunctions": {"execute_state_machine": True},
    "lambda": {"use_docker": False},
}


@dataclass(frozen=True, slots=True)
class Invocation:
    """One Lambda task the state machine ran: what it was given and what it answered."""

    logical_id: str
    handler: str
    payload: Any
    result: Any
    #: The exception's class name when the handler raised (the Step Functions error name).
    error: str
    error_message: str
    at: float  # time.monotonic()


@dataclass
class _FakeLambdaContext:
    """What Powertools and the handlers' deadline read from the Lambda context object.

    The remaining time counts down from the function's configured timeout, as Lambda's does, from
    the moment the invocation starts (after it has taken its turn, see ``call_handler``). Nothing
    kills a handler that overruns it here; the handler's own deadline is what stops it.
    """

    function_name: str
    timeout_seconds: float = 30.0
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = ""
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    started_at: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        elapsed = time.monotonic() - self.started_at
        return max(0, int((self.timeout_seconds - elapsed) * 1000))


class LocalAws:
    """moto with NodeHeal's stack deployed into it; use as a context manager."""

    def __init__(
        self,
        app: SynthesizedApp,
        *,
        kube_provider_factory: Callable[[FunctionSpec], KubeClientProvider],
        region: str = "us-west-2",
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.app = app
        self.region = region
        self._kube_provider_factory = kube_provider_factory
        self._clock = clock
        self._resolver = Resolver(region)
        self._functions = app.functions()
        self._runtimes: dict[str, Runtime] = {}
        self._runtime_lock = threading.Lock()
        self._invocation_lock = threading.RLock()
        self._mock: Any = None
        self._invoke_patch: Any = None
        self._patches: list[Any] = []  # every patch of moto, stopped on exit
        #: Called (in moto's request thread) with the instance ids after each successful EC2 call:
        #: the simulated cluster hangs its kubelet reboot and Karpenter reactions here.
        self.on_instances_rebooted: list[Callable[[list[str]], None]] = []
        self.on_instances_terminated: list[Callable[[list[str]], None]] = []
        #: How each instance was bought and the reservations behind them (moto has no capacity
        #: reservations): DescribeInstances, DescribeCapacityReservations and ReportInstanceStatus.
        self.capacity = CapacityModel()
        self.invocations: list[tuple[str, str]] = []  # (function logical id, outcome)
        #: CPU seconds spent inside the handlers (NodeHeal's code and moto answering its calls):
        #: the benchmarks tell it apart from the rest of the process (moto's Step Functions, the
        #: rule pump, the fake API server), which only the local harness spends.
        self.handler_cpu_seconds = 0.0
        #: Called (in the execution's thread) after each Lambda task, with what it returned or raised.
        self.on_invocation: list[Callable[[Invocation], None]] = []
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._pump: RuleTargetPump | None = None
        self.event_bus_name = ""
        #: Rule name -> URL of the SQS queue standing in for the rule's target.
        self.rule_probes: dict[str, str] = {}
        #: Rule name -> logical id of the function the rule targets in the template.
        self.rule_targets: dict[str, str] = {}
        self.table_name = ""
        self.topic_arn = ""
        self.state_machine_arn = ""
        self.notification_queue_url = ""

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> LocalAws:
        from moto import mock_aws
        from moto.awslambda_simple.models import LambdaSimpleBackend

        self._mock = mock_aws(config=MOTO_CONFIG)
        self._mock.start()
        local = self

        def invoke(
            backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
        ) -> bytes:
            return local._invoke(function_name, body, response_headers)

        self._invoke_patch = mock.patch.object(LambdaSimpleBackend, "invoke", invoke)
        self._invoke_patch.start()
        self._patch_ec2_notifications()
        self._patches += self.capacity.start()
        self._patches += moto_patches.start()
        try:
            self._deploy()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _patch_ec2_notifications(self) -> None:
        from moto.ec2.models.instances import InstanceBackend

        original_reboot = InstanceBackend.reboot_instances
        original_terminate = InstanceBackend.terminate_instances
        local = self

        def reboot_instances(backend: Any, instance_ids: list[str]) -> Any:
            result = original_reboot(backend, instance_ids)
            for listener in list(local.on_instances_rebooted):
                listener(list(instance_ids))
            return result

        def terminate_instances(backend: Any, instance_ids: list[str]) -> Any:
            result = original_terminate(backend, instance_ids)
            for listener in list(local.on_instances_terminated):
                listener(list(instance_ids))
            return result

        for name, replacement in (
            ("reboot_instances", reboot_instances),
            ("terminate_instances", terminate_instances),
        ):
            patcher = mock.patch.object(InstanceBackend, name, replacement)
            patcher.start()
            self._patches.append(patcher)

    def __exit__(self, *exc_info: object) -> None:
        if self._pump is not None:
            self._pump.stop()
            self._pump = None
        with self._clients_lock:
            self._clients.clear()
        for patcher in self._patches:
            patcher.stop()
        self._patches.clear()
        if self._invoke_patch is not None:
            self._invoke_patch.stop()
            self._invoke_patch = None
        if self._mock is not None:
            self._mock.stop()
            self._mock = None

    def client(self, service: str) -> Any:
        """One client per service, shared: clients are thread-safe, but creating them from the
        default session is not, and the exporter, the rule target, the simulated Karpenter and
        every execution's tasks all call AWS from their own threads."""
        with self._clients_lock:
            existing = self._clients.get(service)
            if existing is None:
                existing = self._clients[service] = boto3.client(service, region_name=self.region)
            return existing

    # -- deployment ------------------------------------------------------------------------------

    def _deploy(self) -> None:
        self._export_shared_environment()
        self._deploy_table()
        self._deploy_topic()
        for logical in self._functions:
            arn = f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{logical}"
            self._resolver.refs[logical] = logical
            self._resolver.attributes[(logical, "Arn")] = arn
        for logical in self.app.resources("AWS::IAM::Role"):
            self._resolver.attributes[(logical, "Arn")] = f"arn:aws:iam::{ACCOUNT_ID}:role/{logical}"
            self._resolver.refs[logical] = logical
        self._deploy_state_machine()
        for logical, resource in self.app.resources("AWS::Events::EventBus").items():
            name = resource.get("Properties", {}).get("Name", logical)
            self._resolver.refs[logical] = name
            self._resolver.attributes[(logical, "Arn")] = (
                f"arn:aws:events:{self.region}:{ACCOUNT_ID}:event-bus/{name}"
            )
            self._resolver.attributes[(logical, "Name")] = name
        for logical in self.app.resources("AWS::SQS::Queue"):
            url = self.client("sqs").create_queue(QueueName=f"{logical}-{uuid.uuid4().hex[:6]}")["QueueUrl"]
            self._resolver.refs[logical] = url
            attributes = self.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            self._resolver.attributes[(logical, "Arn")] = attributes["Attributes"]["QueueArn"]
            self._resolver.attributes[(logical, "QueueName")] = url.rsplit("/", 1)[-1]
        self._deploy_event_buses_and_rules()

    def _deploy_event_buses_and_rules(self) -> None:
        """The custom bus and each rule with the template's own EventPattern, so moto's pattern
        matching decides which events go on. moto delivers to SQS but not to Lambda, so each rule
        targets a probe queue; :class:`RuleTargetPump` plays the Lambda target from there."""
        events = self.client("events")
        sqs = self.client("sqs")
        for logical in self.app.resources("AWS::Events::EventBus"):
            name = self._resolver.attributes[(logical, "Name")]
            events.create_event_bus(Name=name)
            self.event_bus_name = self.event_bus_name or name
        for logical, resource in self.app.resources("AWS::Events::Rule").items():
            properties = resource.get("Properties", {})
            if "EventPattern" not in properties:
                continue  # scheduled rules have no pattern and no place in the event path
            target = self._lambda_target(properties)
            if target is None:
                continue  # only Lambda targets run here
            bus = str(self._resolver.resolve(properties.get("EventBusName", "default")))
            name = str(properties.get("Name") or logical)
            events.put_rule(
                Name=name,
                EventBusName=bus,
                EventPattern=json.dumps(self._resolver.resolve(properties["EventPattern"])),
                State=properties.get("State", "ENABLED"),
            )
            url = sqs.create_queue(QueueName=f"nodeheal-rule-probe-{logical}"[:80])["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            events.put_targets(Rule=name, EventBusName=bus, Targets=[{"Id": "probe", "Arn": arn}])
            self.rule_probes[name] = url
            self.rule_targets[name] = target
            self._resolver.refs[logical] = f"{bus}|{name}"

    def _lambda_target(self, rule_properties: Mapping[str, Any]) -> str | None:
        """The logical id of the NodeHeal function a rule targets (``Fn::GetAtt [Fn, Arn]``)."""
        for target in rule_properties.get("Targets", []):
            arn = target.get("Arn")
            if isinstance(arn, Mapping) and "Fn::GetAtt" in arn:
                logical = arn["Fn::GetAtt"][0]
                if logical in self._functions:
                    return str(logical)
        return None

    def _export_shared_environment(self) -> None:
        """Powertools reads its namespace and service name from the process environment when a
        handler module is imported; every function shares this one process, so the variables all
        functions agree on are exported (without overriding what the caller set)."""
        shared: dict[str, str] | None = None
        for spec in self._functions.values():
            values = {
                key: value
                for key, value in spec.environment.items()
                if key.startswith("POWERTOOLS_") and isinstance(value, str)
            }
            shared = values if shared is None else {k: v for k, v in shared.items() if values.get(k) == v}
        for key, value in (shared or {}).items():
            os.environ.setdefault(key, value)

    def _deploy_table(self) -> None:
        logical, resource = self.app.single("AWS::DynamoDB::Table")
        properties = resource["Properties"]
        self.table_name = properties.get("TableName") or f"nodeheal-ledger-{uuid.uuid4().hex[:8]}"
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeySchema": properties["KeySchema"],
            "AttributeDefinitions": properties["AttributeDefinitions"],
            "BillingMode": properties.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if properties.get("GlobalSecondaryIndexes"):
            request["GlobalSecondaryIndexes"] = properties["GlobalSecondaryIndexes"]
        self.client("dynamodb").create_table(**request)
        ttl = properties.get("TimeToLiveSpecification")
        if ttl:
            self.client("dynamodb").update_time_to_live(
                TableName=self.table_name, TimeToLiveSpecification=ttl
            )
        self._resolver.refs[logical] = self.table_name
        self._resolver.attributes[(logical, "Arn")] = (
            f"arn:aws:dynamodb:{self.region}:{ACCOUNT_ID}:table/{self.table_name}"
        )

    def _deploy_topic(self) -> None:
        logical, resource = self.app.single("AWS::SNS::Topic")
        name = resource.get("Properties", {}).get("TopicName") or f"nodeheal-{uuid.uuid4().hex[:8]}"
        self.topic_arn = self.client("sns").create_topic(Name=name)["TopicArn"]
        self._resolver.refs[logical] = self.topic_arn
        self._resolver.attributes[(logical, "TopicArn")] = self.topic_arn
        self._resolver.attributes[(logical, "TopicName")] = name
        # A queue subscribed to the topic shows exactly what a person's subscription would receive.
        self.notification_queue_url = self.subscribe_queue("nodeheal-notifications-probe")

    def subscribe_queue(self, name: str) -> str:
        """A new SQS queue subscribed to the notification topic, as one more subscriber (a
        person's e-mail, a chat integration) would be: every message published from now on
        reaches it too. Returns its URL, for :meth:`notifications`."""
        sqs = self.client("sqs")
        url: str = sqs.create_queue(QueueName=name)["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        self.client("sns").subscribe(TopicArn=self.topic_arn, Protocol="sqs", Endpoint=queue_arn)
        return url

    def _deploy_state_machine(self) -> None:
        logical, resource = self.app.single("AWS::StepFunctions::StateMachine")
        properties = resource["Properties"]
        definition = self._resolver.resolve(properties["DefinitionString"])
        json.loads(definition)  # fail here, with the template at hand, if resolution broke the JSON
        response = self.client("stepfunctions").create_state_machine(
            name=properties.get("StateMachineName") or "NodeHealRemediation",
            definition=definition,
            roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/nodeheal-workflow",
            type=properties.get("StateMachineType", "STANDARD"),
        )
        self.state_machine_arn = response["stateMachineArn"]
        self._resolver.refs[logical] = self.state_machine_arn
        self._resolver.attributes[(logical, "Name")] = self.state_machine_arn.rsplit(":", 1)[-1]

    # -- Lambda dispatch -------------------------------------------------------------------------

    def runtime_for(self, logical_id: str) -> Runtime:
        """The runtime of one function: its template environment, moto clients, the fake cluster."""
        with self._runtime_lock:
            existing = self._runtimes.get(logical_id)
            if existing is not None:
                return existing
            variables = {
                key: str(self._resolver.resolve(value))
                for key, value in self._functions[logical_id].environment.items()
            }
            variables["AWS_REGION"] = self.region
            runtime = Runtime(
                LambdaEnvironment.from_environ(variables),
                client_factory=self.client,
                # Each function reaches the cluster as itself (its own credentials and groups),
                # as each Lambda does through its role's EKS access entry.
                kube_provider_factory=functools.partial(
                    self._kube_provider_factory, self._functions[logical_id]
                ),
                clock=self._clock,
            )
            self._runtimes[logical_id] = runtime
            return runtime

    def function_logical_id(self, handler: str) -> str:
        for logical, spec in self._functions.items():
            if spec.handler == handler:
                return logical
        raise TemplateError(f"no function in the template runs {handler}")

    def call_handler(self, logical_id: str, payload: Any) -> Any:
        """Invoke one function's handler in-process with its own runtime (as Lambda would)."""
        spec = self._functions[logical_id]
        module_name, function_name = spec.handler.rsplit(".", 1)
        handler = getattr(importlib.import_module(module_name), function_name)
        # Powertools' Logger and Metrics are per-container singletons that Lambda never calls from
        # two invocations at once; every function shares them in this process, so invocations
        # take turns here (moto still runs the executions themselves concurrently). The clock of
        # the function's timeout starts once it is this invocation's turn.
        with self._invocation_lock, using_runtime(self.runtime_for(logical_id)):
            context = _FakeLambdaContext(
                function_name=logical_id,
                timeout_seconds=spec.timeout_seconds,
                invoked_function_arn=f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{logical_id}",
            )
            started = time.thread_time()
            try:
                return handler(payload, context)
            finally:
                self.handler_cpu_seconds += time.thread_time() - started

    @contextlib.contextmanager
    def between_invocations(self) -> Iterator[None]:
        """Hold off every Lambda invocation while the block runs.

        moto's backends are not thread-safe: a DynamoDB query iterates the table's items while a
        handler in another thread may be adding one ("dictionary changed size during iteration").
        Handlers take turns (see :meth:`call_handler`); a reader outside them, such as a test or
        benchmark reading the ledger while executions run, takes its turn here.
        """
        with self._invocation_lock:
            yield

    def _invoke(self, function_name: str, body: Any, response_headers: dict[str, Any]) -> bytes:
        logical = function_name.rsplit(":", 1)[-1] if function_name.startswith("arn:") else function_name
        if logical not in self._functions:
            response_headers["x-amz-function-error"] = "Unhandled"
            self.invocations.append((logical, "ResourceNotFound"))
            return json.dumps(
                {"errorType": "ResourceNotFoundException", "errorMessage": f"no function {logical}"}
            ).encode()
        payload = json.loads(body) if body else {}
        try:
            result = self.call_handler(logical, payload)
        except Exception as error:
            response_headers["x-amz-function-error"] = "Unhandled"
            self.invocations.append((logical, type(error).__name__))
            self._notify_invocation(logical, payload, None, error)
            return json.dumps(
                {
                    "errorType": type(error).__name__,
                    "errorMessage": str(error),
                    "stackTrace": traceback.format_exception(error)[-3:],
                }
            ).encode()
        self.invocations.append((logical, "ok"))
        self._notify_invocation(logical, payload, result, None)
        return json.dumps(result).encode()

    def _notify_invocation(self, logical: str, payload: Any, result: Any, error: Exception | None) -> None:
        invocation = Invocation(
            logical_id=logical,
            handler=self._functions[logical].handler,
            payload=payload,
            result=result,
            error=type(error).__name__ if error else "",
            error_message=str(error) if error else "",
            at=time.monotonic(),
        )
        for listener in list(self.on_invocation):
            listener(invocation)

    # -- operations used by tests, the demo and benchmarks ---------------------------------------

    def deliver(self, event: Mapping[str, Any]) -> Any:
        """Deliver an EventBridge event to the ingest function, as the rule's target would."""
        return self.call_handler(self.function_logical_id("lambdas.ingest.handler"), event)

    def start_rule_targets(self) -> RuleTargetPump:
        """Start delivering what the rules match to the ingest function (stopped on exit)."""
        if self._pump is None:
            self._pump = RuleTargetPump(self)
            self._pump.start()
        return self._pump

    def put_events(self, *entries: Mapping[str, Any]) -> list[dict[str, Any]]:
        """PutEvents on the NodeHeal bus, as the exporter (or anyone allowed to) would."""
        results: list[dict[str, Any]] = []
        for start in range(0, len(entries), 10):
            batch = [{"EventBusName": self.event_bus_name, **entry} for entry in entries[start : start + 10]]
            results.extend(self.client("events").put_events(Entries=batch)["Entries"])
        return results

    def wait_for_execution(self, execution_arn: str, timeout: float = 60.0) -> dict[str, Any]:
        from moto.stepfunctions.parser.api import ExecutionStatus

        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + timeout
        # The wait reads the status moto keeps on its execution object, and asks the API only once
        # it changed: a DescribeExecution every 20 ms (a request's whole serialization and
        # parsing each) was a fifth of a workflow test's CPU.
        execution = self._moto_execution(execution_arn)
        while True:
            if execution is None or execution.exec_status is not ExecutionStatus.RUNNING:
                description: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
                if description["status"] != "RUNNING":
                    return description
            if time.monotonic() > deadline:
                raise TimeoutError(f"execution {execution_arn} still running after {timeout}s")
            time.sleep(0.02)

    def _moto_execution(self, execution_arn: str) -> Any:
        """moto 5.2.5's object of a started execution (its ``exec_status`` is what DescribeExecution
        answers), or None when there is none to watch."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        try:
            return stepfunctions_parser_backends[ACCOUNT_ID][self.region].describe_execution(execution_arn)
        except Exception:  # unknown here: the API answers the caller as it would
            return None

    def executions(self) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        found: list[dict[str, Any]] = []
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=self.state_machine_arn):
            found.extend(page["executions"])
        return found

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        events: list[dict[str, Any]] = []
        for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
            events.extend(page["events"])
        return events

    def state_names(self, execution_arn: str) -> list[str]:
        return [
            event["stateEnteredEventDetails"]["name"]
            for event in self.history(execution_arn)
            if "stateEnteredEventDetails" in event
        ]

    def notifications(self, queue_url: str = "") -> list[dict[str, Any]]:
        """Drain a subscriber queue of the topic (the probe, or one of :meth:`subscribe_queue`): each
        SNS message as SNS delivered it, as {subject, message, attributes}."""
        sqs = self.client("sqs")
        queue_url = queue_url or self.notification_queue_url
        messages: list[dict[str, Any]] = []
        while True:
            response = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
            batch = response.get("Messages", [])
            if not batch:
                return messages
            for message in batch:
                envelope = json.loads(message["Body"])
                messages.append(
                    {
                        "subject": envelope.get("Subject", ""),
                        "message": envelope.get("Message", ""),
                        "attributes": {
                            k: v.get("Value") for k, v in envelope.get("MessageAttributes", {}).items()
                        },
                    }
                )
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])

    def run_instance(
        self,
        *,
        cluster: str,
        node_pool: str = "gpu",
        instance_type: str = "p5.48xlarge",
        zone: str = "us-west-2b",
        owned: bool = True,
    ) -> str:
        """An EC2 instance tagged as Karpenter v1 tags the instances it launches."""
        (instance_id,) = self.run_instances(
            1, cluster=cluster, node_pool=node_pool, instance_type=instance_type, zone=zone, owned=owned
        )
        return instance_id

    def run_instances(
        self,
        count: int,
        *,
        cluster: str,
        node_pool: str = "gpu",
        instance_type: str = "p5.48xlarge",
        zone: str = "us-west-2b",
        owned: bool = True,
    ) -> list[str]:
        """``count`` such instances in one RunInstances call (a fleet is built in seconds, not
        one ~15 ms call per node)."""
        tags = [{"Key": "karpenter.sh/nodepool", "Value": node_pool}]
        if owned:
            tags += [
                {"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"},
                {"Key": "eks:eks-cluster-name", "Value": cluster},
            ]
        # The GPU type itself, as DescribeInstances reports it (the capacity rules read it); the tag
        # is the one Karpenter's instances carry too.
        response = self.client("ec2").run_instances(
            ImageId="ami-12c6146b",
            MinCount=count,
            MaxCount=count,
            InstanceType=instance_type,
            Placement={"AvailabilityZone": zone},
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [*tags, {"Key": "node.kubernetes.io/instance-type", "Value": instance_type}],
                }
            ],
        )
        return [str(instance["InstanceId"]) for instance in response["Instances"]]

    def instance_state(self, instance_id: str) -> str:
        reservations = self.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
        return str(reservations[0]["Instances"][0]["State"]["Name"])

    def event_envelope(
        self, detail: Mapping[str, Any], *, source: str, event_id: str | None = None
    ) -> dict[str, Any]:
        """The event as EventBridge hands it to a target."""
        return {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": "Node Condition Changed",
            "source": source,
            "account": ACCOUNT_ID,
            "time": format_timestamp(self._clock()),
            "region": self.region,
            "resources": [],
            "detail": dict(detail),
        }


def iter_task_results(history: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    """(state name, output) of every state that exited, in order."""
    for event in history:
        details = event.get("stateExitedEventDetails")
        if details:
            yield details["name"], json.loads(details.get("output") or "null")
