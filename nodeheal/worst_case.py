"""How long one remediation can take, computed from the configuration (docs/architecture.md, D5). Pure.

Every wait of the state machine has a bound from configuration, and the per-node lock is never
renewed, so the lock TTL and the workflow timeout are safe only if they cover the longest run the
configuration allows. This module computes that run, term by term, so that a configuration whose
lock TTL or workflow timeout falls short is refused with the numbers, and ``nodeheal explain
--config`` can show them.

The rules of the computation:

* **Every Lambda attempt lasts its whole timeout**, and every Retry clause of a task is exhausted
  (Step Functions counts each clause's attempts separately, so a task runs at most
  1 + the sum of ``MaxAttempts`` times), each retry after its full backoff
  (``IntervalSeconds * BackoffRate ** k``; full jitter only shortens it).
* **Loops are bounded by wall clock, not by round count.** The drain reports ``timedOut`` in the
  first round that starts ``drain.timeoutSeconds`` after the first round, and the recovery check
  reports ``failed`` in the first check that starts ``reboot.recoveryTimeoutSeconds`` after the
  reboot; so each loop ends at most one poll and two rounds (the last round begun before the
  deadline, and the one that reports it) after its deadline.
* **The longest path** is taken: confirm, cordon, drain to the timeout, force, reboot, wait the
  whole recovery timeout, terminate as the escalation, record. Mode is ignored (a redeploy can
  change it under a running execution) and every condition rule counts, the built-in ones
  included, whichever pool it applies to.
* ``drain.forceGraceSeconds`` is not a term: forced deletions return at once and the pods
  terminate while the instance action proceeds.

What the sum leaves out (Lambda's init phase before each attempt, late Wait states, the
milliseconds of each state transition, clock skew between the Lambdas that write and compare the
lock's expiry) is what :func:`margin_seconds` is for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from nodeheal.config import PolicySettings, RemediationSettings, RetrySettings
from nodeheal.errors import (
    ContendedError,
    DeadlineExceededError,
    Ec2IncorrectStateError,
    Ec2ThrottledError,
    KubernetesApiUnavailableError,
    LedgerContentionError,
)
from nodeheal.policy.classify import DEFAULT_CONDITION_RULES
from nodeheal.settings_reader import SettingsReader, all_problems, problem
from nodeheal.steps import (
    ADMIT,
    CHECK_RECOVERY,
    CORDON,
    DRAIN,
    FORCE_DRAIN,
    REBOOT,
    RECORD,
    RECORD_FAILURE,
    STEPS,
    TERMINATE,
    UNCORDON,
)

#: Each step's Lambda timeout, from its longest sequence of calls (``nodeheal.steps``): the stack
#: deploys these (``nodeheal/cdk/workflow_tasks.py``) and the worst case below counts them.
TASK_TIMEOUT_SECONDS: Mapping[str, int] = MappingProxyType(
    {step.name: step.timeout_seconds for step in STEPS}
)

#: Steps that claim a mutation of the node on its lock first (``nodeheal.workflow.guard``
#: ``before_mutation``): the ones a contender can hold back (``ContendedError``).
MUTATING_TASKS = frozenset(step.name for step in STEPS if step.mutating)

#: How long a claimed mutation may still be running: a preempting execution waits this long after
#: the holder's last claim before taking the lock, so two executions never mutate a node at once.
#: Longer than the longest mutating task's Lambda timeout (a test holds the stack to it).
MUTATION_BUSY_SECONDS = 180

#: The first wait of a step held back by a contender; each next one doubles (no jitter: the
#: retries must span the contender's whole mark, see :func:`contended_retry_clause`).
CONTENDED_RETRY_INTERVAL_SECONDS = 15
CONTENDED_RETRY_BACKOFF = 2.0

#: Steps that are not safe to run twice after Lambda killed one at its timeout (it may have done
#: part of its work), as the registry declares them: a second RebootInstances is a second reboot.
NOT_IDEMPOTENT_TASKS = frozenset(step.name for step in STEPS if not step.idempotent)

#: Transient errors retried with the configured backoff (``retry`` in cdk.json).
TRANSIENT_ERRORS: tuple[str, ...] = (
    KubernetesApiUnavailableError.__name__,
    Ec2ThrottledError.__name__,
    # The invocation's deadline stopped a slow call before Lambda could kill the function.
    DeadlineExceededError.__name__,
)

#: The Lambda service's own transient failures (the ones CDK's ``retryOnServiceExceptions`` names).
LAMBDA_SERVICE_ERRORS: tuple[str, ...] = (
    "Lambda.ClientExecutionTimeoutException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    # Throttled: the function never ran, so every step may retry it (CDK's list lacks it).
    "Lambda.TooManyRequestsException",
)

#: The two names Step Functions reports a function killed at its Lambda timeout under. The function
#: may have done part of its work, so only idempotent steps retry them.
LAMBDA_TIMEOUT_ERRORS: tuple[str, ...] = ("Sandbox.Timedout", "Lambda.Unknown")

#: The margin by which the lock TTL and the workflow timeout must exceed their worst case: a
#: tenth of it, and never less than five minutes. The worst case already assumes every attempt
#: runs to its timeout; the margin covers what it cannot count (see the module docstring): Lambda
#: may spend up to 10 s initialising before each attempt's timeout starts, and the longest path
#: has a few dozen attempts and state transitions outside the wall-clock-bounded loops.
MARGIN_SHARE = 0.10
MIN_MARGIN_SECONDS = 300

#: The longest the transient-error backoff of one task may wait in total (``retry``): a dead API
#: server should fail the remediation in minutes, not hours.
MAX_RETRY_WAIT_SECONDS = 900

#: How long after an execution ends with no Catch (failed, timed out, aborted) its lock is
#: released: the sweeper's period (5 min; it finds the ends whose status-change event was lost)
#: plus a minute for EventBridge to deliver and the finalizer to run (D6).
SWEEPER_PERIOD_SECONDS = 300
FINALIZER_DELIVERY_SECONDS = 60
FINALIZER_LATENCY_SECONDS = SWEEPER_PERIOD_SECONDS + FINALIZER_DELIVERY_SECONDS


@dataclass(frozen=True, slots=True)
class RetryClause:
    """One ASL ``Retry`` entry of a task."""

    errors: tuple[str, ...]
    interval_seconds: int
    max_attempts: int
    backoff_rate: float
    #: ``JitterStrategy: FULL`` (spreads retries out; only ever shortens a wait).
    jitter: bool = True

    @property
    def total_wait_seconds(self) -> float:
        """The backoff before every retry of this clause added up: interval * rate^k, k < attempts."""
        return sum(self.interval_seconds * self.backoff_rate**k for k in range(self.max_attempts))


def task_retry_clauses(retry: RetrySettings, *, idempotent: bool = True) -> tuple[RetryClause, ...]:
    """The Retry clauses of every workflow task, in the order the state machine lists them.

    The definition (``nodeheal/cdk/workflow_definition.py``) renders exactly these, so the worst case
    computed here is the one the deployed state machine allows. A clause with no attempts is left out.
    """
    clauses = (
        RetryClause(LAMBDA_SERVICE_ERRORS, 2, 6, 2.0),
        RetryClause(TRANSIENT_ERRORS, retry.interval_seconds, retry.max_attempts, retry.backoff_rate),
        # Lost a race on a shared ledger item: another execution just wrote it; retry soon, spread out.
        RetryClause((LedgerContentionError.__name__,), 1, 6, 1.5),
        # EC2 refuses a reboot/terminate while the instance is pending or stopping; give it time.
        RetryClause((Ec2IncorrectStateError.__name__,), max(5, retry.interval_seconds), 3, 2.0),
        # Killed at its Lambda timeout (its deadline should have ended it first, so something was
        # slower than every bound): twice more, a few seconds apart, each up to a full timeout.
        RetryClause(LAMBDA_TIMEOUT_ERRORS, 2, 2 if idempotent else 0, 2.0),
    )
    return tuple(clause for clause in clauses if clause.max_attempts > 0)


def contention_seconds(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> int:
    """How long a contender's mark stays fresh after the contender writes it (D2): its next admit
    starts one ``lockWaitPollSeconds`` later and runs at most admit's Lambda timeout, and renews the
    mark or preempts the lock; a minute more covers Lambda's init and the state transitions. A mark
    older than this was left by a contender that ended without taking over."""
    return settings.lock_wait_poll_seconds + task_timeouts[ADMIT.name] + 60


def contended_retry_clause(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> RetryClause:
    """The Retry of a mutating step that a contender holds back (``ContendedError``).

    A live contender renews its mark at each admit until the holder's last claimed step can no
    longer be running (:data:`MUTATION_BUSY_SECONDS`), then preempts: the holder's retry then ends
    superseded. A contender that ended first (aborted, timed out, its fault cleared) stops renewing
    it, and its mark lapses :func:`contention_seconds` after its last renewal; the holder's retry
    then goes on with its own fault. So the retries span at least both, with no jitter."""
    needed = MUTATION_BUSY_SECONDS + contention_seconds(settings, task_timeouts)
    attempts = 1
    while CONTENDED_RETRY_INTERVAL_SECONDS * (CONTENDED_RETRY_BACKOFF**attempts - 1) < needed:
        attempts += 1
    return RetryClause(
        (ContendedError.__name__,),
        CONTENDED_RETRY_INTERVAL_SECONDS,
        attempts,
        CONTENDED_RETRY_BACKOFF,
        jitter=False,
    )


def contended_wait_seconds(settings: RemediationSettings, task_timeouts: Mapping[str, int]) -> int:
    """The longest a contender that never takes over holds one step back: the clause's backoff, and
    every attempt to the longest mutating step's timeout."""
    clause = contended_retry_clause(settings, task_timeouts)
    longest = max(task_timeouts[name] for name in MUTATING_TASKS)
    return math.ceil(clause.total_wait_seconds + clause.max_attempts * longest)


def task_worst_case_seconds(timeout_seconds: int, clauses: Iterable[RetryClause]) -> int:
    """The longest one task state can run: every attempt to its timeout, every clause exhausted."""
    listed = tuple(clauses)
    attempts = 1 + sum(clause.max_attempts for clause in listed)
    return math.ceil(attempts * timeout_seconds + sum(clause.total_wait_seconds for clause in listed))


@dataclass(frozen=True, slots=True)
class Term:
    """One named part of a worst case, with how it was computed."""

    name: str
    seconds: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": self.seconds, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Breakdown:
    """A duration as the sum of named terms, so a refusal and ``explain`` can show each number."""

    terms: tuple[Term, ...]

    @property
    def total_seconds(self) -> int:
        return sum(term.seconds for term in self.terms)

    def seconds(self, name: str) -> int:
        for term in self.terms:
            if term.name == name:
                return term.seconds
        raise KeyError(name)

    def describe(self) -> str:
        """``admit 3078 + confirmation 600 + ... = 28012 s``, for error messages."""
        parts = " + ".join(f"{term.name} {term.seconds}" for term in self.terms)
        return f"{parts} = {self.total_seconds} s"

    def to_json(self) -> dict[str, Any]:
        return {
            "totalSeconds": self.total_seconds,
            "total": format_duration(self.total_seconds),
            "terms": [term.to_json() for term in self.terms],
        }


def format_duration(seconds: int) -> str:
    """``28012`` -> ``7 h 46 min 52 s``; for people reading a refusal."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    if minutes:
        parts.append(f"{minutes} min")
    if secs or not parts:
        parts.append(f"{secs} s")
    return " ".join(parts)


def margin_seconds(worst_case_seconds: int) -> int:
    """How much a lock TTL or workflow timeout must exceed ``worst_case_seconds`` by."""
    return max(math.ceil(worst_case_seconds * MARGIN_SHARE), MIN_MARGIN_SECONDS)


def longest_confirmation_seconds(policy: PolicySettings) -> int:
    """The longest confirmation wait any condition rule can impose, in any pool.

    The built-in rules count unless every scope that could reach them replaces them.
    """
    scopes = [None, *policy.node_pools]
    longest = 0
    for pool in scopes:
        rules = {**DEFAULT_CONDITION_RULES, **policy.for_pool(pool).condition_rules}
        longest = max([longest, *(rule.confirm_seconds for rule in rules.values())])
    return longest


def retry_wait_seconds(retry: RetrySettings) -> int:
    """Total backoff of the configured transient-error retries of one task."""
    return math.ceil(
        RetryClause(
            TRANSIENT_ERRORS, retry.interval_seconds, retry.max_attempts, retry.backoff_rate
        ).total_wait_seconds
    )


class _Tasks:
    """Worst cases of the workflow's tasks under one retry configuration."""

    def __init__(self, retry: RetrySettings, task_timeouts: Mapping[str, int]) -> None:
        self._retry = retry
        self._timeouts = task_timeouts

    def _clauses(self, name: str) -> tuple[RetryClause, ...]:
        return task_retry_clauses(self._retry, idempotent=name not in NOT_IDEMPOTENT_TASKS)

    def seconds(self, name: str) -> int:
        return task_worst_case_seconds(self._timeouts[name], self._clauses(name))

    def detail(self, name: str) -> str:
        clauses = self._clauses(name)
        attempts = 1 + sum(clause.max_attempts for clause in clauses)
        backoff = sum(clause.total_wait_seconds for clause in clauses)
        return f"{name}: {attempts} attempts x {self._timeouts[name]} s + {backoff:g} s of backoff"


def _drain_terms(settings: RemediationSettings, tasks: _Tasks) -> list[Term]:
    """The drain at its longest: to its deadline, one more poll, two eviction rounds, and the
    force round when the drain forces at its timeout."""
    drain = settings.drain
    hold_is_longer = drain.do_not_disrupt_wait_seconds > drain.timeout_seconds
    drain_deadline = max(drain.timeout_seconds, drain.do_not_disrupt_wait_seconds)
    deadline_key = "drain.doNotDisruptWaitSeconds" if hold_is_longer else "drain.timeoutSeconds"
    terms = [
        Term(
            DRAIN.name,
            drain_deadline + drain.poll_seconds + 2 * tasks.seconds(DRAIN.name),
            f"{deadline_key} {drain_deadline} + drain.pollSeconds {drain.poll_seconds} + 2 eviction "
            f"rounds of {tasks.seconds(DRAIN.name)} ({tasks.detail(DRAIN.name)})",
        )
    ]
    if drain.on_timeout == "force":
        terms.append(Term("force drain", tasks.seconds(FORCE_DRAIN.name), tasks.detail(FORCE_DRAIN.name)))
    return terms


def drain_worst_case_seconds(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> int:
    """The longest NodeHeal's drain of a node can take under ``settings``: the drain terms of
    :func:`holding_worst_case`, which the capacity rules count before a replacement can be up."""
    return sum(term.seconds for term in _drain_terms(settings, _Tasks(settings.retry, task_timeouts)))


def holding_worst_case(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> Breakdown:
    """The longest one execution can hold a node's lock: from the admit that takes it to the record
    that releases it. The lock TTL must exceed this by :func:`margin_seconds`.

    The path names the steps it knows; a step of the registry it does not name counts as often as
    its entry says the longest path runs it (``runs_on_the_longest_path``), each time at its own
    worst case (a step that loops to a deadline needs its loop here)."""
    tasks = _Tasks(settings.retry, task_timeouts)
    reboot = settings.reboot
    record = (
        RECORD.name
        if tasks.seconds(RECORD.name) >= tasks.seconds(RECORD_FAILURE.name)
        else RECORD_FAILURE.name
    )
    after_recovery = (
        TERMINATE.name if tasks.seconds(TERMINATE.name) >= tasks.seconds(UNCORDON.name) else UNCORDON.name
    )
    terms = [
        Term(
            ADMIT.name,
            tasks.seconds(ADMIT.name),
            f"the Admit that takes the lock; {tasks.detail(ADMIT.name)}",
        ),
        Term(
            "confirmation",
            longest_confirmation_seconds(settings.policy),
            "the longest confirmSeconds of any condition rule (built-in, global or per pool)",
        ),
        Term(f"{ADMIT.name} after confirmation", tasks.seconds(ADMIT.name), tasks.detail(ADMIT.name)),
        Term(CORDON.name, tasks.seconds(CORDON.name), tasks.detail(CORDON.name)),
        *_drain_terms(settings, tasks),
    ]
    terms += [
        Term(REBOOT.name, tasks.seconds(REBOOT.name), tasks.detail(REBOOT.name)),
        Term(
            "recovery",
            reboot.recovery_timeout_seconds + reboot.poll_seconds + 2 * tasks.seconds(CHECK_RECOVERY.name),
            f"reboot.recoveryTimeoutSeconds {reboot.recovery_timeout_seconds} + reboot.pollSeconds "
            f"{reboot.poll_seconds} + 2 checks of {tasks.seconds(CHECK_RECOVERY.name)} "
            f"({tasks.detail(CHECK_RECOVERY.name)})",
        ),
        Term(
            "terminate (escalation)",
            tasks.seconds(after_recovery),
            f"the recovery failed, so the instance is replaced; {tasks.detail(after_recovery)}",
        ),
        Term(RECORD.name, tasks.seconds(record), f"releases the lock; {tasks.detail(record)}"),
    ]
    # The steps the path names (record-failure ends it in record's place).
    named = {
        step.name
        for step in (ADMIT, CORDON, DRAIN, FORCE_DRAIN, REBOOT, CHECK_RECOVERY, TERMINATE, UNCORDON, RECORD)
    } | {RECORD_FAILURE.name}
    terms += [
        Term(
            step.name,
            step.runs_on_the_longest_path * tasks.seconds(step.name),
            f"{step.runs_on_the_longest_path} x ({tasks.detail(step.name)})",
        )
        for step in STEPS
        if step.name not in named and step.runs_on_the_longest_path
    ]
    contended = contended_retry_clause(settings, task_timeouts)
    terms.append(
        Term(
            "a contender that never takes over",
            contended_wait_seconds(settings, task_timeouts),
            f"one step held back by a more severe execution that ended first: {contended.max_attempts} "
            f"retries {contended.interval_seconds} s apart, doubling, until its mark lapses "
            f"(counted once: a second would need a second contender that also ends first; the lock "
            f"would then expire and a person be told, never a fault dropped)",
        )
    )
    return Breakdown(tuple(terms))


def execution_worst_case(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> Breakdown:
    """The longest one whole execution can run: it may first wait behind another execution that
    holds the node (until that lock is released or expires, noticed one poll late), then hold the
    lock itself for its own worst case. The workflow timeout must exceed this by :func:`margin_seconds`."""
    tasks = _Tasks(settings.retry, task_timeouts)
    holding = holding_worst_case(settings, task_timeouts)
    return Breakdown(
        (
            Term(
                ADMIT.name,
                tasks.seconds(ADMIT.name),
                f"the Admit that finds the lock held; {tasks.detail(ADMIT.name)}",
            ),
            Term(
                "wait behind the lock holder",
                settings.lock_ttl_seconds + settings.lock_wait_poll_seconds,
                f"lockTtlSeconds {settings.lock_ttl_seconds} + lockWaitPollSeconds "
                f"{settings.lock_wait_poll_seconds}",
            ),
            Term("hold the lock", holding.total_seconds, holding.describe()),
        )
    )


def remediation_bound(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> Breakdown:
    """The bound of safety invariant I2: a bad condition that arrives while another execution
    holds its node is acted on within this. The holder releases the lock within its worst case (or,
    if it ended where no Catch sees, the finalizer does within its latency); then the newcomer's
    own confirmation runs."""
    holding = holding_worst_case(settings, task_timeouts)
    return Breakdown(
        (
            Term(
                "confirmation",
                longest_confirmation_seconds(settings.policy),
                "the newcomer's own confirmation: the longest confirmSeconds of any condition rule",
            ),
            Term("holder's worst case", holding.total_seconds, holding.describe()),
            Term(
                "finalizer latency",
                FINALIZER_LATENCY_SECONDS,
                f"sweeper period {SWEEPER_PERIOD_SECONDS} s + delivery and finalizer "
                f"{FINALIZER_DELIVERY_SECONDS} s, when the holder ended where no Catch sees",
            ),
        )
    )


def required_lock_ttl_seconds(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> int:
    """The smallest ``lockTtlSeconds`` the configuration accepts."""
    holding = holding_worst_case(settings, task_timeouts).total_seconds
    return holding + margin_seconds(holding)


def required_workflow_timeout_minutes(
    settings: RemediationSettings, task_timeouts: Mapping[str, int] = TASK_TIMEOUT_SECONDS
) -> int:
    """The smallest ``workflow.timeoutMinutes`` the configuration accepts."""
    execution = execution_worst_case(settings, task_timeouts).total_seconds
    return math.ceil((execution + margin_seconds(execution)) / 60)


# -- the checks a deployment's settings pass ------------------------------------------------------


def checked_settings(raw: Any, path: str = "settings") -> RemediationSettings:
    """:meth:`RemediationSettings.from_json` with what the durations break together (D5): every
    problem in one ConfigurationError, the timing checks' after the others'."""
    with all_problems():
        settings = RemediationSettings.from_json(raw, path)
        # The reader only names keys here: ``raw`` was read, and any problem of its shape reported.
        report_timing(settings, SettingsReader({}, path))
    return settings


def report_timing(settings: RemediationSettings, reader: SettingsReader) -> None:
    """Report what the durations of ``settings`` break together (D5): a lock TTL that does not
    cover one execution's worst case, a retry backoff that waits too long. Run after the per-key
    checks, on the values they let through (a refused one counts as its default)."""
    drain = settings.drain
    if 0 < drain.do_not_disrupt_wait_seconds >= drain.timeout_seconds:
        where = reader.where("drain")
        problem(
            f"{where}.doNotDisruptWaitSeconds ({drain.do_not_disrupt_wait_seconds}) must be shorter than "
            f"{where}.timeoutSeconds ({drain.timeout_seconds}), or 0: pods held back until the drain "
            "times out are never evicted, only force-deleted or left behind"
        )
    if drain.deletes_after_timeout and drain.delete_after_seconds >= drain.timeout_seconds:
        where = reader.where("drain")
        problem(
            f"{where}.deleteAfterSeconds ({drain.delete_after_seconds}) must be shorter than "
            f"{where}.timeoutSeconds ({drain.timeout_seconds}) when an {where}.evictionModes rule uses "
            '"delete-after-timeout": the drain would time out (drain.onTimeout) before deleting them'
        )
    retry_wait = retry_wait_seconds(settings.retry)
    if retry_wait > MAX_RETRY_WAIT_SECONDS:
        retry = settings.retry
        problem(
            f"{reader.where('retry')} waits {retry_wait} s in backoff over {retry.max_attempts} retries "
            f"({retry.interval_seconds} s x {retry.backoff_rate:g}^k); at most "
            f"{MAX_RETRY_WAIT_SECONDS} s, so a dead API fails the remediation in minutes"
        )
    holding = holding_worst_case(settings)
    margin = margin_seconds(holding.total_seconds)
    required = holding.total_seconds + margin
    if settings.lock_ttl_seconds < required:
        problem(
            f"{reader.where('lockTtlSeconds')} ({settings.lock_ttl_seconds}) must be at least {required}: "
            f"one execution can hold the lock for {holding.total_seconds} s "
            f"({format_duration(holding.total_seconds)}) and the lock is never renewed, so it "
            f"needs a margin of {margin} s ({MARGIN_SHARE:.0%}, at least "
            f"{MIN_MARGIN_SECONDS} s). Worst case: {holding.describe()}"
        )
