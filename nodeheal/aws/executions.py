"""The remediation state machine's executions, read back for the finalizer and the sweeper (D6)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from nodeheal.config import RemediationSettings
from nodeheal.errors import ConfigurationError
from nodeheal.workflow.finalizer import UNCAUGHT_END_STATUSES, EndedExecution

#: The state that hands every execution the deployed settings (nodeheal/cdk/workflow_definition.py).
LOAD_SETTINGS_STATE = "Load settings"
#: History events per page when reading an execution backwards (the API's maximum is 1000).
HISTORY_PAGE = 100
#: The newest events of a history hold the last state entered; never read more than this many.
MAX_HISTORY_EVENTS = 1000


def _json_object(raw: Any) -> Mapping[str, Any] | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def deployed_settings(client: Any, state_machine_arn: str) -> RemediationSettings:
    """The settings the deployed state machine gives every execution: what Admit decides with.

    Read from the definition (the ``Load settings`` state), not from a cdk.json that may differ
    from what was deployed. Not re-checked for timing: they were checked when they were deployed.
    """
    definition = _json_object(client.describe_state_machine(stateMachineArn=state_machine_arn)["definition"])
    state = (definition or {}).get("States", {}).get(LOAD_SETTINGS_STATE)
    settings = (state or {}).get("Parameters", {}).get("settings") if isinstance(state, Mapping) else None
    if not isinstance(settings, Mapping):
        raise ConfigurationError(
            f"state machine {state_machine_arn} has no {LOAD_SETTINGS_STATE!r} state with settings: "
            "is it NodeHeal's remediation workflow?"
        )
    return RemediationSettings.from_json(settings, "deployed settings")


class StepFunctionsExecutions:
    def __init__(self, client: Any, state_machine_arn: str) -> None:
        self._client = client
        self._state_machine_arn = state_machine_arn

    def describe(self, execution_arn: str) -> EndedExecution:
        response = self._client.describe_execution(executionArn=execution_arn)
        status = str(response["status"])
        if str(response.get("stateMachineArn", "")) != self._state_machine_arn:
            status = "NOT_OURS"
        return EndedExecution(
            arn=execution_arn,
            name=str(response["name"]),
            status=status,
            started_at=response["startDate"],
            stopped_at=response.get("stopDate"),
            error=str(response.get("error", "")),
            cause=str(response.get("cause", "")),
            input=_json_object(response.get("input")),
        )

    def last_state(self, execution_arn: str) -> Mapping[str, Any] | None:
        """The input of the newest state entered that carries the workflow state.

        Read newest first (``reverseOrder``); event IDs only grow, so the newest match is the one
        with the highest ID whatever order a page comes in, and a page read newest first ends the
        search at its first match.
        """
        read = 0
        newest: tuple[int, Mapping[str, Any]] | None = None
        kwargs: dict[str, Any] = {
            "executionArn": execution_arn,
            "reverseOrder": True,
            "maxResults": HISTORY_PAGE,
            "includeExecutionData": True,
        }
        while read < MAX_HISTORY_EVENTS:
            page = self._client.get_execution_history(**kwargs)
            events = page.get("events", [])
            read += len(events)
            for event in events:
                entered = event.get("stateEnteredEventDetails")
                state = _json_object(entered.get("input")) if entered else None
                if state is not None and "event" in state and (newest is None or event["id"] > newest[0]):
                    newest = (int(event["id"]), state)
            newest_first = len(events) > 1 and events[0]["id"] > events[-1]["id"]
            token = page.get("nextToken")
            if (newest is not None and newest_first) or not token:
                break
            kwargs["nextToken"] = token
        return newest[1] if newest else None

    def ended_since(self, since: datetime, *, longest_execution: timedelta) -> list[str]:
        """Executions are listed newest start first; one that ended after ``since`` started at most
        ``longest_execution`` before it, so paging stops there."""
        oldest_start = since - longest_execution
        ended: list[str] = []
        paginator = self._client.get_paginator("list_executions")
        for status in UNCAUGHT_END_STATUSES:
            for page in paginator.paginate(stateMachineArn=self._state_machine_arn, statusFilter=status):
                items = page.get("executions", [])
                for item in items:
                    stopped = item.get("stopDate")
                    if stopped is not None and stopped >= since:
                        ended.append(str(item["executionArn"]))
                if items and items[-1]["startDate"] < oldest_start:
                    break
        return ended
