"""A step-at-a-time interpreter of the Amazon States Language NodeHeal's stack synthesizes.

The seeded simulation runs the remediation state machine exactly as deployed: it reads the
definition from the synthesized template (states, Choice rules, Retry and Catch clauses, the
workflow timeout) and walks it one state at a time, so a scheduler can interleave many executions
and the cluster between any two steps. Time is the caller's: a Wait or a Retry interval sets
``wake_at`` and the caller decides when that moment has come.

Semantics follow the Amazon States Language specification and the Step Functions developer guide:

* ``InputPath``, ``Parameters`` (``.$`` keys, ``$$`` context paths), ``ResultPath``, ``OutputPath``;
* Retry: the first retrier whose ``ErrorEquals`` matches is the one used; once its
  ``MaxAttempts`` are spent the error goes to Catch (later retriers are not consulted); the delay
  is ``IntervalSeconds * BackoffRate ** attempt``, capped by ``MaxDelaySeconds``, and with
  ``JitterStrategy: FULL`` drawn uniformly below it; counters reset when the state is left;
* ``States.ALL`` matches every error except ``States.DataLimitExceeded`` and ``States.Runtime``,
  which end the execution (no Catch sees them), as ``States.Timeout`` of the execution does;
* a state's input or output over 256 KiB is ``States.DataLimitExceeded``.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

#: Step Functions' limit on a state's input or output (UTF-8 bytes of the JSON).
MAX_PAYLOAD_BYTES = 256 * 1024
#: Errors that end the execution whatever Catch says.
TERMINAL_ERRORS = frozenset({"States.DataLimitExceeded", "States.Runtime"})

RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
ABORTED = "ABORTED"


class AslError(Exception):
    """The definition uses something this interpreter does not implement, or is malformed."""


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What a Task's resource answered: an output, or an error name and its cause."""

    output: Any = None
    error: str | None = None
    cause: str = ""


Invoke = Callable[[str, str, Any], TaskOutcome]
"""``invoke(state_name, resource, payload)``: run the task's resource and say how it ended."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One state the execution went through (a line of the trace)."""

    execution: str
    state: str
    kind: str
    at: datetime
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StateMachine:
    start_at: str
    states: Mapping[str, Mapping[str, Any]]
    timeout_seconds: int | None

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any]) -> StateMachine:
        states = definition.get("States")
        start = definition.get("StartAt")
        if not isinstance(states, Mapping) or not isinstance(start, str) or start not in states:
            raise AslError("a definition needs StartAt naming one of its States")
        for name, state in states.items():
            kind = state.get("Type")
            if kind not in ("Pass", "Task", "Choice", "Wait", "Succeed", "Fail"):
                raise AslError(f"state {name!r}: type {kind!r} is not supported by the simulation")
            for target in _next_states(state):
                if target not in states:
                    raise AslError(f"state {name!r} goes to {target!r}, which does not exist")
        timeout = definition.get("TimeoutSeconds")
        return cls(start_at=start, states=states, timeout_seconds=int(timeout) if timeout else None)

    def edges(self) -> dict[str, tuple[str, ...]]:
        """Every state's possible successors (Next, Choice branches and Default, Catch targets)."""
        return {name: tuple(_next_states(state)) for name, state in self.states.items()}


def _next_states(state: Mapping[str, Any]) -> list[str]:
    targets = []
    if "Next" in state:
        targets.append(str(state["Next"]))
    for rule in state.get("Choices") or ():
        targets.append(str(rule["Next"]))
    if "Default" in state:
        targets.append(str(state["Default"]))
    for catcher in state.get("Catch") or ():
        targets.append(str(catcher["Next"]))
    return targets


# -- paths -----------------------------------------------------------------------------------------


class _Missing:
    pass


MISSING = _Missing()


def read_path(data: Any, path: str, context: Mapping[str, Any] | None = None) -> Any:
    """The value at a reference path (``$``, ``$.a.b``, ``$$.Execution.Name``), or MISSING."""
    if path.startswith("$$"):
        if context is None:
            return MISSING
        data, path = context, "$" + path[2:]
    if not path.startswith("$"):
        raise AslError(f"not a reference path: {path!r}")
    value = data
    for part in [p for p in path[1:].split(".") if p]:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return MISSING
    return value


def _required(data: Any, path: str, context: Mapping[str, Any] | None, state: str) -> Any:
    value = read_path(data, path, context)
    if value is MISSING:
        raise _StateError(
            "States.Runtime", f"state {state!r}: the path {path!r} matches nothing in the input"
        )
    return value


def _parameters(template: Any, data: Any, context: Mapping[str, Any], state: str) -> Any:
    if isinstance(template, Mapping):
        out = {}
        for key, value in template.items():
            if key.endswith(".$"):
                out[key[:-2]] = copy.deepcopy(_required(data, str(value), context, state))
            else:
                out[key] = _parameters(value, data, context, state)
        return out
    if isinstance(template, list):
        return [_parameters(item, data, context, state) for item in template]
    return copy.deepcopy(template)


def _with_result(data: Any, result_path: Any, result: Any, state: str) -> Any:
    if result_path is None:
        return data
    path = str(result_path)
    if path == "$":
        return result
    if not path.startswith("$."):
        raise AslError(f"state {state!r}: ResultPath {path!r} is not supported")
    # Copy only the objects along the path: nothing else of the input changes, and values in a
    # state are never modified in place, so the rest is shared.
    out = dict(data) if isinstance(data, Mapping) else {}
    target = out
    parts = path[2:].split(".")
    for part in parts[:-1]:
        child = target.get(part)
        child = dict(child) if isinstance(child, Mapping) else {}
        target[part] = child
        target = child
    target[parts[-1]] = result
    return out


class _StateError(Exception):
    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


# -- Choice rules ----------------------------------------------------------------------------------

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "StringEquals": lambda a, b: isinstance(a, str) and a == b,
    "BooleanEquals": lambda a, b: isinstance(a, bool) and a == b,
    "NumericEquals": lambda a, b: _number(a) and a == b,
    "NumericLessThan": lambda a, b: _number(a) and a < b,
    "NumericGreaterThan": lambda a, b: _number(a) and a > b,
    "NumericLessThanEquals": lambda a, b: _number(a) and a <= b,
    "NumericGreaterThanEquals": lambda a, b: _number(a) and a >= b,
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def rule_matches(rule: Mapping[str, Any], data: Any, state: str) -> bool:
    if "And" in rule:
        return all(rule_matches(r, data, state) for r in rule["And"])
    if "Or" in rule:
        return any(rule_matches(r, data, state) for r in rule["Or"])
    if "Not" in rule:
        return not rule_matches(rule["Not"], data, state)
    variable = rule.get("Variable")
    if not isinstance(variable, str):
        raise AslError(f"state {state!r}: a Choice rule without Variable: {rule}")
    value = read_path(data, variable)
    if "IsPresent" in rule:
        return (value is not MISSING) == bool(rule["IsPresent"])
    for operator, compare in _COMPARISONS.items():
        if operator in rule:
            return value is not MISSING and compare(value, rule[operator])
    raise AslError(f"state {state!r}: unsupported Choice rule {sorted(rule)}")


# -- executions --------------------------------------------------------------------------------------


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _matches(error_equals: Any, error: str) -> bool:
    names = list(error_equals or ())
    if error in names:
        return True
    if "States.ALL" in names:
        return error not in TERMINAL_ERRORS
    if "States.TaskFailed" in names:
        return not error.startswith("States.") or error == "States.TaskFailed"
    return False


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


@dataclass
class Execution:
    """One execution: where it is, its data, and when it may take its next step."""

    machine: StateMachine
    name: str
    arn: str
    input: Any
    started_at: datetime
    status: str = RUNNING
    current: str = ""
    data: Any = None
    #: The next step may run at or after this instant (a Wait, a Retry interval).
    wake_at: datetime | None = None
    stopped_at: datetime | None = None
    error: str = ""
    cause: str = ""
    #: Inputs of the states entered, newest last (what GetExecutionHistory's StateEntered holds).
    entered: list[tuple[str, Any]] = field(default_factory=list)
    #: Bytes of ``data`` as JSON when the current state was entered.
    size: int = 0
    _attempts: dict[int, int] = field(default_factory=dict)
    _waiting: bool = False
    #: The value ``size`` was measured on.
    _sized: Any = None

    def __post_init__(self) -> None:
        self.current = self.current or self.machine.start_at
        if self.data is None:
            self.data = copy.deepcopy(self.input)
        self.wake_at = self.started_at
        self._entered(self.current)

    @property
    def done(self) -> bool:
        return self.status != RUNNING

    @property
    def timeout_at(self) -> datetime | None:
        seconds = self.machine.timeout_seconds
        return self.started_at + timedelta(seconds=seconds) if seconds else None

    @property
    def state(self) -> Mapping[str, Any]:
        return self.machine.states[self.current]

    def context(self, now: datetime) -> dict[str, Any]:
        return {
            "Execution": {
                "Id": self.arn,
                "Name": self.name,
                "StartTime": _stamp(self.started_at),
                "Input": self.input,
            },
            "State": {"Name": self.current, "EnteredTime": _stamp(now)},
            "StateMachine": {"Id": self.arn.rsplit(":", 1)[0]},
        }

    def ready(self, now: datetime) -> bool:
        return not self.done and (self.wake_at is None or self.wake_at <= now)

    def stop(self, status: str, now: datetime, error: str, cause: str) -> None:
        self.status = status
        self.stopped_at = now
        self.error = error
        self.cause = cause
        self.wake_at = None

    def _entered(self, name: str) -> None:
        self.current = name
        self._attempts = {}
        self._waiting = False
        # Values in a state are never changed in place (see _with_result), so the same object has
        # the same size: a Choice or a Wait passes its input on and is not measured again.
        if self.data is not self._sized:
            self.size = _size(self.data)
            self._sized = self.data
        if self.size > MAX_PAYLOAD_BYTES:
            raise _StateError(
                "States.DataLimitExceeded",
                f"the input of state {name!r} is {self.size} bytes, over the {MAX_PAYLOAD_BYTES} limit",
            )
        self.entered.append((name, self.data))

    def _go(self, name: str | None, now: datetime) -> None:
        if name is None:
            self.stop(SUCCEEDED, now, "", "")
            return
        self.wake_at = now
        self._entered(name)

    def _output(self, output: Any) -> Any:
        path = self.state.get("OutputPath", "$")
        if path is None:
            return {}
        value = read_path(output, str(path))
        if value is MISSING:
            raise _StateError("States.Runtime", f"OutputPath {path!r} matches nothing")
        return value

    def _effective_input(self, now: datetime) -> Any:
        state = self.state
        path = state.get("InputPath", "$")
        data = {} if path is None else _required(self.data, str(path), None, self.current)
        if "Parameters" in state:
            data = _parameters(state["Parameters"], data, self.context(now), self.current)
        return data

    def step(self, now: datetime, invoke: Invoke, rng: random.Random) -> StepRecord:
        """Take the current state's next step at ``now`` (the caller checked :meth:`ready`)."""
        name = self.current
        kind = str(self.state.get("Type"))
        try:
            detail = self._step(now, invoke, rng)
        except _StateError as failure:
            self.stop(FAILED, now, failure.error, failure.cause)
            detail = f"execution failed: {failure.error}"
        return StepRecord(self.name, name, kind, now, detail)

    def _step(self, now: datetime, invoke: Invoke, rng: random.Random) -> str:
        state = self.state
        kind = state["Type"]
        nxt = state.get("Next") if not state.get("End") else None
        if kind == "Pass":
            result = state["Result"] if "Result" in state else self._effective_input(now)
            self.data = self._output(
                _with_result(self.data, state.get("ResultPath", "$"), result, self.current)
            )
            self._go(nxt, now)
            return ""
        if kind == "Choice":
            for rule in state.get("Choices") or ():
                if rule_matches(rule, self.data, self.current):
                    self._go(str(rule["Next"]), now)
                    return f"-> {rule['Next']}"
            if "Default" not in state:
                raise _StateError("States.NoChoiceMatched", f"no rule of {self.current!r} matched")
            self._go(str(state["Default"]), now)
            return f"-> {state['Default']} (default)"
        if kind == "Wait":
            if not self._waiting:
                seconds = self._wait_seconds(state)
                self._waiting = True
                self.wake_at = now + timedelta(seconds=seconds)
                return f"{seconds:g}s"
            self._go(str(nxt) if nxt else None, now)
            return ""
        if kind == "Succeed":
            self.data = self._output(self.data)
            self.stop(SUCCEEDED, now, "", "")
            return ""
        if kind == "Fail":
            cause = state.get("Cause", "")
            if "CausePath" in state:
                found = read_path(self.data, str(state["CausePath"]))
                cause = "" if found is MISSING else str(found)
            self.stop(FAILED, now, str(state.get("Error", "")), str(cause))
            return str(state.get("Error", ""))
        if kind == "Task":
            return self._task(now, invoke, rng, nxt)
        raise AslError(f"state type {kind!r}")

    def _wait_seconds(self, state: Mapping[str, Any]) -> float:
        if "Seconds" in state:
            return float(state["Seconds"])
        if "SecondsPath" in state:
            value = read_path(self.data, str(state["SecondsPath"]))
            if not _number(value) or value < 0:
                raise _StateError(
                    "States.Runtime",
                    f"state {self.current!r}: SecondsPath {state['SecondsPath']} is {value!r}, not a "
                    "non-negative number",
                )
            return float(value)
        raise AslError(f"state {self.current!r}: only Seconds and SecondsPath waits are supported")

    def _task(self, now: datetime, invoke: Invoke, rng: random.Random, nxt: Any) -> str:
        state = self.state
        payload = self._effective_input(now)
        shaped = "Parameters" in state or state.get("InputPath", "$") != "$"
        if shaped and _size(payload) > MAX_PAYLOAD_BYTES:
            raise _StateError("States.DataLimitExceeded", f"the input of task {self.current!r} is too large")
        outcome = invoke(self.current, str(state.get("Resource", "")), payload)
        if self.done:
            # Stopped (timed out, aborted) while the task ran: Step Functions drops its result.
            return "stopped while the task ran"
        if outcome.error is None:
            result = outcome.output
            if "ResultSelector" in state:
                result = _parameters(state["ResultSelector"], result, self.context(now), self.current)
            if _size(result) > MAX_PAYLOAD_BYTES:
                raise _StateError(
                    "States.DataLimitExceeded", f"the result of task {self.current!r} is too large"
                )
            self.data = self._output(
                _with_result(self.data, state.get("ResultPath", "$"), result, self.current)
            )
            self._go(str(nxt) if nxt else None, now)
            return "ok"
        return self._task_error(now, rng, outcome.error, outcome.cause)

    def _task_error(self, now: datetime, rng: random.Random, error: str, cause: str) -> str:
        state = self.state
        if error in TERMINAL_ERRORS:
            raise _StateError(error, cause)
        for index, retrier in enumerate(state.get("Retry") or ()):
            if not _matches(retrier.get("ErrorEquals"), error):
                continue
            attempts = self._attempts.get(index, 0)
            if attempts < int(retrier.get("MaxAttempts", 3)):
                delay = (
                    float(retrier.get("IntervalSeconds", 1))
                    * float(retrier.get("BackoffRate", 2.0)) ** attempts
                )
                if "MaxDelaySeconds" in retrier:
                    delay = min(delay, float(retrier["MaxDelaySeconds"]))
                if retrier.get("JitterStrategy") == "FULL":
                    delay = rng.uniform(0, delay)
                self._attempts[index] = attempts + 1
                self.wake_at = now + timedelta(seconds=delay)
                return f"{error}: retry {attempts + 1} in {delay:.1f}s"
            break
        for catcher in state.get("Catch") or ():
            if _matches(catcher.get("ErrorEquals"), error):
                caught = {"Error": error, "Cause": cause}
                self.data = _with_result(self.data, catcher.get("ResultPath", "$"), caught, self.current)
                self._go(str(catcher["Next"]), now)
                return f"{error}: caught -> {catcher['Next']}"
        raise _StateError(error, cause)
