"""The remediation state machine: Step Functions owns every wait and every loop.

Shape (state names are what a person reads in the console)::

    Load settings -> Admit
      confirm  -> Wait for confirmation -> Admit
      wait     -> Wait for the node's lock -> Admit      (another execution holds the node, D2)
      stop     -> Record outcome
      proceed  -> none/alert: Record outcome | cordon: Cordon -> Record outcome
                  reboot/replace: Cordon -> Evict pods <-> Wait between eviction rounds
                    refused by the drain policy -> Record failure (drain aborted)
                    timed out: force -> Force-delete remaining pods | abort -> Record failure
                    replace -> Terminate instance -> Record outcome
                    reboot  -> Reboot instance -> Wait for reboot <-> Check recovery
                               recovered -> Uncordon -> Record outcome
                               not recovered -> Terminate instance (escalation)
    any task's stop (node replaced/gone, condition cleared, paused, superseded)
             -> Uncordon after the condition cleared? -> [Uncordon (condition cleared)] -> Record outcome
    any task failure -> Record failure -> Remediation failed

Every Lambda task receives the whole state and writes its result under its own key (``ResultPath``),
so the execution history shows each step's input and output in full. Each task is short and
idempotent; Retry clauses name domain errors by class name (``nodeheal.errors``) and come from
``nodeheal.worst_case``, which computes from the same clauses how long a run can take
(docs/architecture.md, D5).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from nodeheal.aws.executions import LOAD_SETTINGS_STATE
from nodeheal.config import RemediationSettings
from nodeheal.errors import STOP_ERRORS, ConditionClearedError
from nodeheal.steps import (
    ADMIT,
    CHECK_RECOVERY,
    CORDON,
    DRAIN,
    FORCE_DRAIN,
    READ_CAPACITY,
    REBOOT,
    RECORD,
    RECORD_FAILURE,
    TERMINATE,
    UNCORDON,
    Step,
)
from nodeheal.worst_case import RetryClause, contended_retry_clause, task_retry_clauses

# Each task writes its result under its step's result key (``nodeheal.steps``), where the steps
# after it read it. A caught failure goes here:
FAILURE = "$.failure"
#: A step's stop (nodeheal.errors.STOP_ERRORS): {"Error": class name, "Cause": the Lambda error JSON}.
STOPPED = "$.stopped"


def _at(step: Step, field: str = "") -> str:
    """The JSONPath of a step's result (its ``ResultPath``), or of one field of it."""
    return f"$.{step.result_key}" + (f".{field}" if field else "")


def _acts_on_the_instance() -> sfn.Condition:
    """The decision reboots or replaces the instance: it is read for capacity, then drained."""
    return sfn.Condition.or_(
        *(
            sfn.Condition.string_equals(_at(ADMIT, "decision.action"), action)
            for action in ("reboot", "replace")
        )
    )


class _DefinitionBuilder:
    def __init__(
        self,
        scope: Construct,
        functions: Mapping[str, lambda_.IFunction],
        settings: RemediationSettings,
    ) -> None:
        self._scope = scope
        self._functions = functions
        self._settings = settings
        self._record = self._task(RECORD, catch=False)
        self._record.next(sfn.Succeed(self._scope, "Done"))
        self._record_failure = self._build_failure_path()
        self._stopped = self._build_stop_path()

    def build(self) -> sfn.IChainable:
        record = self._record

        uncordon = self._task(UNCORDON).next(record)
        terminate = self._task(TERMINATE).next(record)
        recovery_loop = self._build_recovery_loop(record, uncordon, terminate)
        reboot = self._task(REBOOT).next(
            sfn.Choice(self._scope, "Was the instance rebooted?")
            .when(sfn.Condition.boolean_equals(_at(REBOOT, "performed"), True), recovery_loop)
            # The fault worsened to one a reboot does not heal (severity only rises, D2).
            .when(sfn.Condition.string_equals(_at(REBOOT, "escalateTo"), "replace"), terminate)
            .otherwise(record)
        )
        instance_action = (
            sfn.Choice(self._scope, "Reboot or replace?")
            .when(sfn.Condition.string_equals(_at(ADMIT, "decision.action"), "reboot"), reboot)
            .otherwise(terminate)
        )
        drain_loop = self._build_drain_loop(instance_action)
        cordon = self._task(CORDON).next(
            sfn.Choice(self._scope, "Drain needed?")
            .when(_acts_on_the_instance(), drain_loop)
            .otherwise(record)
        )
        choose_action = (
            sfn.Choice(self._scope, "Which action?")
            .when(
                sfn.Condition.or_(
                    *(
                        sfn.Condition.string_equals(_at(ADMIT, "decision.action"), action)
                        for action in ("cordon", "reboot", "replace")
                    )
                ),
                cordon,
            )
            .otherwise(record)
        )
        # The capacity behind the instance, read before the cordon whenever the instance itself
        # may go: it can hold a replacement back or keep a reboot from escalating (D12).
        read_capacity = self._task(READ_CAPACITY).next(choose_action)
        capacity_needed = (
            sfn.Choice(self._scope, "Instance action?")
            .when(_acts_on_the_instance(), read_capacity)
            .otherwise(choose_action)
        )
        admit = self._task(ADMIT)
        wait_for_confirmation = sfn.Wait(
            self._scope,
            "Wait for confirmation",
            comment="The condition must stay bad this long before NodeHeal acts (policy confirmSeconds).",
            time=sfn.WaitTime.seconds_path(_at(ADMIT, "waitSeconds")),
        ).next(admit)
        wait_for_lock = sfn.Wait(
            self._scope,
            "Wait for the node's lock",
            comment="Another execution is remediating this node: wait behind it, then admit again "
            "against the live node (policy lockWaitPollSeconds; at most lockTtlSeconds).",
            time=sfn.WaitTime.seconds_path(_at(ADMIT, "waitSeconds")),
        ).next(admit)
        admit.next(
            sfn.Choice(self._scope, "Admitted?")
            .when(sfn.Condition.string_equals(_at(ADMIT, "verdict"), "confirm"), wait_for_confirmation)
            .when(sfn.Condition.string_equals(_at(ADMIT, "verdict"), "wait"), wait_for_lock)
            .when(sfn.Condition.string_equals(_at(ADMIT, "verdict"), "proceed"), capacity_needed)
            .otherwise(record)
        )
        load_settings = sfn.Pass(
            self._scope,
            LOAD_SETTINGS_STATE,
            comment="The deployed policy, budgets and timings travel with the execution for audit.",
            parameters={
                "event.$": "$.event",
                "eventId.$": "$.eventId",
                "receivedAt.$": "$.receivedAt",
                "settings": self._settings.to_json(),
                "execution": {
                    "name.$": "$$.Execution.Name",
                    "id.$": "$$.Execution.Id",
                    "startedAt.$": "$$.Execution.StartTime",
                },
            },
        )
        return load_settings.next(admit)

    def _build_drain_loop(self, after_drain: sfn.IChainable) -> sfn.IChainable:
        drain = self._task(DRAIN)
        wait = sfn.Wait(
            self._scope,
            "Wait between eviction rounds",
            comment="Pods get time to stop; a PDB that refused an eviction (429) is asked again next round. "
            "The round says how long: 1, 2, 4 s... up to drain.pollSeconds, so pods that stop at once "
            "release the node within seconds.",
            time=sfn.WaitTime.seconds_path(_at(DRAIN, "waitSeconds")),
        ).next(drain)
        force = self._task(FORCE_DRAIN).next(after_drain)
        aborted = sfn.Pass(
            self._scope,
            "Drain aborted",
            comment="drain.onTimeout is abort, or the drain policy refused a pod (drain.emptyDir or "
            "drain.unmanagedPods refuse): stop here, leave the node cordoned, tell a person.",
            parameters={
                "Error": "DrainAbortedError",
                "Cause.$": _at(DRAIN, "summary"),
            },
            result_path=FAILURE,
        ).next(self._record_failure)
        on_timeout = (
            sfn.Choice(self._scope, "Force or abort?")
            .when(sfn.Condition.string_equals("$.settings.drain.onTimeout", "force"), force)
            .otherwise(aborted)
        )
        drain.next(
            sfn.Choice(self._scope, "Drained?")
            .when(sfn.Condition.boolean_equals(_at(DRAIN, "refused"), True), aborted)
            .when(sfn.Condition.boolean_equals(_at(DRAIN, "done"), True), after_drain)
            .when(sfn.Condition.boolean_equals(_at(DRAIN, "timedOut"), True), on_timeout)
            .otherwise(wait)
        )
        return drain

    def _build_recovery_loop(
        self, record: sfn.IChainable, uncordon: sfn.IChainable, terminate: sfn.IChainable
    ) -> sfn.IChainable:
        check = self._task(CHECK_RECOVERY)
        wait = sfn.Wait(
            self._scope,
            "Wait for reboot",
            comment="The node must come back with a new boot ID, Ready, and the condition healthy.",
            time=sfn.WaitTime.seconds_path("$.settings.reboot.pollSeconds"),
        ).next(check)
        check.next(
            sfn.Choice(self._scope, "Recovered?")
            .when(sfn.Condition.string_equals(_at(CHECK_RECOVERY, "status"), "recovered"), uncordon)
            .when(sfn.Condition.string_equals(_at(CHECK_RECOVERY, "status"), "failed"), terminate)
            .when(sfn.Condition.string_equals(_at(CHECK_RECOVERY, "status"), "gone"), record)
            .otherwise(wait)
        )
        return wait

    def _build_stop_path(self) -> sfn.IChainable:
        """Where a step's stop (node replaced or gone, condition cleared, paused, superseded)
        leads: ``Record outcome``, through an uncordon when the condition cleared after NodeHeal
        cordoned and the policy says ``drain.onConditionCleared: uncordon``."""
        stopped = sfn.Choice(
            self._scope,
            "Uncordon after the condition cleared?",
            comment="A stopped remediation leaves the node cordoned for a person, except a cleared "
            "condition with drain.onConditionCleared=uncordon.",
        )
        uncordon = self._task(UNCORDON, state=f"{UNCORDON.state} (condition cleared)", stop_to=stopped).next(
            self._record
        )
        stopped.when(
            sfn.Condition.and_(
                sfn.Condition.string_equals("$.stopped.Error", ConditionClearedError.__name__),
                sfn.Condition.string_equals("$.settings.drain.onConditionCleared", "uncordon"),
                sfn.Condition.is_present(_at(CORDON)),
                sfn.Condition.is_not_present(_at(UNCORDON)),
            ),
            uncordon,
        ).otherwise(self._record)
        return stopped

    def _build_failure_path(self) -> sfn.IChainable:
        record_failure = self._task(RECORD_FAILURE, catch=False)
        return record_failure.next(
            sfn.Fail(
                self._scope,
                "Remediation failed",
                error="RemediationFailed",
                cause_path=_at(RECORD_FAILURE, "summary"),
            )
        )

    def _task(
        self,
        step: Step,
        *,
        state: str = "",
        catch: bool = True,
        stop_to: sfn.IChainable | None = None,
    ) -> tasks.LambdaInvoke:
        """The task state of a step of the registry (``nodeheal.steps``), named (unless ``state``
        names a second state of the same step), keyed and retried as its entry says."""
        task = tasks.LambdaInvoke(
            self._scope,
            state or step.state,
            lambda_function=self._functions[step.name],
            payload_response_only=True,
            # The Lambda service's transient errors are among the clauses below, with the others.
            retry_on_service_exceptions=False,
            result_path=_at(step),
        )
        for clause in task_retry_clauses(self._settings.retry, idempotent=step.idempotent):
            self._add_retry(task, clause)
        if step.mutating:
            # A more severe execution waits for the node: wait for it to take over, or for its
            # mark to lapse because it ended first, instead of leaving the fault to nobody (D2).
            self._add_retry(task, contended_retry_clause(self._settings))
        if catch:
            # A stop is not a failure: catch it first (Catchers are matched in order).
            task.add_catch(
                stop_to or self._stopped,
                errors=[error.__name__ for error in STOP_ERRORS],
                result_path=STOPPED,
            )
            task.add_catch(self._record_failure, errors=["States.ALL"], result_path=FAILURE)
        return task

    @staticmethod
    def _add_retry(task: tasks.LambdaInvoke, clause: RetryClause) -> None:
        task.add_retry(
            errors=list(clause.errors),
            interval=Duration.seconds(clause.interval_seconds),
            max_attempts=clause.max_attempts,
            backoff_rate=clause.backoff_rate,
            jitter_strategy=sfn.JitterType.FULL if clause.jitter else sfn.JitterType.NONE,
        )


def build_definition(
    scope: Construct,
    *,
    functions: Mapping[str, lambda_.IFunction],
    settings: RemediationSettings,
) -> sfn.IChainable:
    """Build the remediation state graph inside ``scope`` from the task functions and the settings."""
    return _DefinitionBuilder(scope, functions, settings).build()
