"""The seeded simulation's fakes of AWS and the Lambda runtime, over the scheduler's state.

A handler runs as deployed, inside a :class:`SimRuntime`: its adapters are the simulation's
in-memory ones (the ledger, the world's Nodes, Pods, Events and instances), and Step Functions, SNS
and the Lambda context object are the fakes here. :mod:`nodeheal.sim.seeded.schedule` builds them
and decides when each handler runs; they read what they need of its state through
:class:`SimulationState`, so this module does not import the scheduler.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodeheal.runtime import LambdaEnvironment, Runtime
from nodeheal.sim.seeded import asl
from nodeheal.sim.seeded.template import REGION, SimFunction
from nodeheal.sim.seeded.world import MemoryEvents, MemoryInstances, MemoryNodes, MemoryPods, World
from nodeheal.workflow.finalizer import EndedExecution
from nodeheal.workflow.ports import KubeAccess


class TimedInvocation(Protocol):
    """What the Lambda context reads of one invocation: its number, when it began and its timeout."""

    @property
    def number(self) -> int: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def timeout_seconds(self) -> float: ...


class RunningExecution(Protocol):
    """One execution of the state machine, as the scheduler keeps it."""

    @property
    def run(self) -> asl.Execution: ...


class SimulationState(Protocol):
    """What the fakes read of the running simulation (:class:`~nodeheal.sim.seeded.schedule.Simulation`)."""

    @property
    def world(self) -> World: ...
    @property
    def ledger(self) -> Any: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def deployed_mode(self) -> str: ...
    @property
    def notifier(self) -> SimNotifier: ...
    @property
    def starter(self) -> SimStarter: ...
    @property
    def executions_port(self) -> SimExecutions: ...
    @property
    def executions(self) -> Mapping[str, RunningExecution]: ...
    @property
    def by_arn(self) -> Mapping[str, RunningExecution]: ...
    def now(self) -> datetime: ...
    def start_execution(self, name: str, payload: Mapping[str, Any]) -> str: ...


class SimContext:
    """What Powertools and the handlers read from the Lambda context object."""

    def __init__(
        self, function: SimFunction, invocation: TimedInvocation, clock: Callable[[], datetime]
    ) -> None:
        self.function_name = function.spec.logical_id
        self.memory_limit_in_mb = 256
        self.invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:123456789012:function:{function.spec.logical_id}"
        )
        self.aws_request_id = f"req-{invocation.number}"
        self.log_group_name = ""
        self.log_stream_name = ""
        self._invocation = invocation
        self._clock = clock

    def get_remaining_time_in_millis(self) -> int:
        used = (self._clock() - self._invocation.started_at).total_seconds()
        return max(0, int((self._invocation.timeout_seconds - used) * 1000))


class SimRuntime(Runtime):
    """A Lambda container's runtime whose adapters are the simulation's in-memory ones."""

    def __init__(self, sim: SimulationState, function: SimFunction) -> None:
        environment = dict(function.environment)
        if "NODEHEAL_MODE" in environment and sim.deployed_mode:
            environment["NODEHEAL_MODE"] = sim.deployed_mode
        super().__init__(
            LambdaEnvironment.from_environ(environment),
            client_factory=_no_clients,
            clock=sim.now,
        )
        self._sim = sim
        # Runtime builds its adapters lazily (cached properties); these are the built ones.
        self.__dict__.update(
            ledger=sim.ledger,
            notifier=sim.notifier,
            instances=MemoryInstances(sim.world, reboot_heals=lambda: sim.rng.random() < 0.6),
            executions=sim.executions_port,
            starter=sim.starter,
        )

    def kube(self, cluster: str, deadline: Any = None) -> KubeAccess:
        world = self._sim.world
        return KubeAccess(nodes=MemoryNodes(world), pods=MemoryPods(world), events=MemoryEvents(world))


def _no_clients(service: str) -> Any:
    raise AssertionError(f"the simulation has no {service} client: every adapter is in memory")


class SimNotifier:
    """The notification topic (SNS): what was published, kept in order."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def publish(self, notification: Any) -> str:
        self.sent.append(notification)
        return f"msg-{len(self.sent)}"


class SimStarter:
    """Starting an execution (ingest's port), as the scheduler's own start."""

    def __init__(self, sim: SimulationState) -> None:
        self._sim = sim

    def start(self, name: str, payload: Mapping[str, Any]) -> str:
        return self._sim.start_execution(name, payload)


class SimExecutions:
    """The finalizer's view of Step Functions (describe, history, listing), over the simulation."""

    def __init__(self, sim: SimulationState) -> None:
        self._sim = sim

    def describe(self, execution_arn: str) -> EndedExecution:
        run = self._sim.by_arn[execution_arn].run
        status = run.status
        return EndedExecution(
            arn=run.arn,
            name=run.name,
            status=status,
            started_at=run.started_at,
            stopped_at=run.stopped_at,
            error=run.error,
            cause=run.cause,
            input=run.input,
        )

    def last_state(self, execution_arn: str) -> Mapping[str, Any] | None:
        run = self._sim.by_arn[execution_arn].run
        for _, data in reversed(run.entered):
            if isinstance(data, Mapping) and "event" in data:
                return data
        return None

    def ended_since(self, since: datetime, *, longest_execution: timedelta) -> list[str]:
        return [
            e.run.arn
            for e in self._sim.executions.values()
            if e.run.status in ("FAILED", "TIMED_OUT", "ABORTED")
            and e.run.stopped_at is not None
            and e.run.stopped_at >= since
        ]
