"""nodeheal.worst_case: the worst case of one remediation, and the refusals it drives (D5, defect 6)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodeheal import worst_case
from nodeheal.cdk.workflow_tasks import WORKFLOW_TASKS
from nodeheal.config import DrainSettings, RemediationSettings, RetrySettings
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError
from nodeheal.workflow.state import WorkflowState
from nodeheal.worst_case import RetryClause

CDK_JSON = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())
SHIPPED: dict[str, Any] = CDK_JSON["context"]["nodeheal"]


def parse(**overrides: Any) -> NodeHealConfig:
    return NodeHealConfig.from_cdk_context({"clusters": ["training-on-eks"], **overrides})


def settings(**overrides: Any) -> RemediationSettings:
    return worst_case.checked_settings(overrides)


# -- the worst case ------------------------------------------------------------------------------


def test_defect_6_task_worst_case_counts_every_attempt_and_every_backoff() -> None:
    # Two clauses: 1 + 2 + 3 = 6 attempts of 10 s, backoff (1 + 2) + (4 + 4 + 4) = 15 s.
    clauses = (RetryClause(("A",), 1, 2, 2.0), RetryClause(("B",), 4, 3, 1.0))
    assert worst_case.task_worst_case_seconds(10, clauses) == 75
    # Fractional backoff rounds the total up, never down.
    assert worst_case.task_worst_case_seconds(10, (RetryClause(("C",), 1, 2, 1.5),)) == 33
    assert worst_case.task_worst_case_seconds(10, ()) == 10


def test_defect_6_breakdown_sums_a_config_checked_by_hand() -> None:
    config = settings(
        policy={
            "conditionRules": {"GPUProblem": {"action": "replace", "confirmSeconds": 60}},
            # A pool's rule is the longest confirmation of all (the built-in ones are 600 s).
            "nodePools": {
                "gpu": {"conditionRules": {"KernelDeadlock": {"action": "replace", "confirmSeconds": 900}}}
            },
        },
        drain={"timeoutSeconds": 100, "pollSeconds": 5, "doNotDisruptWaitSeconds": 0},
        reboot={"recoveryTimeoutSeconds": 200, "pollSeconds": 10},
        retry={"intervalSeconds": 1, "maxAttempts": 1, "backoffRate": 1.0},
        lockTtlSeconds=28_075,
    )
    # Retry clauses of every idempotent task:
    #   Lambda service errors  6 attempts, 2 + 4 + 8 + 16 + 32 + 64        = 126 s
    #   transient (retry)      1 attempt,  1                               =   1 s
    #   ledger contention      6 attempts, 1 + 1.5 + ... + 1.5^5           =  20.78125 s
    #   EC2 incorrect state    3 attempts, 5 + 10 + 20                     =  35 s
    #   Lambda timeouts        2 attempts, 2 + 4                           =   6 s
    # so 19 attempts and 188.78125 s of backoff; reboot (not idempotent) has no timeout clause: 17
    # attempts and 182.78125 s. Task timeouts (TASK_TIMEOUT_SECONDS, from their call counts):
    # admit, drain, force drain 130 s; terminate 120; cordon 100; uncordon 90; reboot 80; record 60;
    # check recovery 40; read capacity 20. So admit 19 * 130 + 188.78 = 2659 s, cordon 2089, reboot
    # 17 * 80 + 182.78 = 1543, check recovery 949, terminate 2469, record 1329, read capacity 569.
    # A contender that never takes over holds one step back: its mark lasts lockWaitPollSeconds 30 +
    # admit's timeout 130 + 60 = 220 s after its last renewal, at most MUTATION_BUSY 180 s in, so
    # the retries span 400 s: 15 + 30 + 60 + 120 + 240 = 465 s, each attempt up to 130 s: 1115 s.
    holding = worst_case.holding_worst_case(config)
    assert [(term.name, term.seconds) for term in holding.terms] == [
        ("admit", 2659),
        ("confirmation", 900),
        ("admit after confirmation", 2659),
        ("cordon", 2089),
        ("drain", 100 + 5 + 2 * 2659),
        ("force drain", 2659),
        ("reboot", 1543),
        ("recovery", 200 + 10 + 2 * 949),
        ("terminate (escalation)", 2469),
        ("record", 1329),
        ("read-capacity", 569),
        ("a contender that never takes over", 465 + 5 * 130),
    ]
    assert (
        holding.total_seconds
        == 3 * 2659 + 900 + 2089 + 5423 + 1543 + 2108 + 2469 + 1329 + 569 + 1115
        == 25_522
    )
    assert holding.describe().endswith(
        "record 1329 + read-capacity 569 + a contender that never takes over 1115 = 25522 s"
    )
    # Margin: 10 % (2552.2, rounded up) is more than the 5-minute floor.
    assert worst_case.margin_seconds(25_522) == 2553
    assert worst_case.required_lock_ttl_seconds(config) == 28_075

    execution = worst_case.execution_worst_case(config)
    assert [(term.name, term.seconds) for term in execution.terms] == [
        ("admit", 2659),
        ("wait behind the lock holder", 28_075 + 30),
        ("hold the lock", 25_522),
    ]
    # 56286 s + a margin of 5629 s = 61915 s, i.e. 1031.9 minutes.
    assert execution.total_seconds == 56_286
    assert worst_case.required_workflow_timeout_minutes(config) == 1032

    bound = worst_case.remediation_bound(config)
    assert [(term.name, term.seconds) for term in bound.terms] == [
        ("confirmation", 900),
        ("holder's worst case", 25_522),
        ("finalizer latency", 300 + 60),
    ]
    assert bound.total_seconds == 26_782


def test_defect_6_abort_has_no_forced_deletion_and_a_long_hold_extends_the_drain() -> None:
    aborting = settings(drain={"onTimeout": "abort"})
    assert "force drain" not in [term.name for term in worst_case.holding_worst_case(aborting).terms]
    # Built directly (the config refuses it): a hold longer than the timeout bounds the drain.
    held = RemediationSettings(
        drain=DrainSettings(timeout_seconds=100, poll_seconds=10, do_not_disrupt_wait_seconds=500)
    )
    drain_round = worst_case.holding_worst_case(held).seconds("force drain")
    assert worst_case.holding_worst_case(held).seconds("drain") == 500 + 10 + 2 * drain_round


def test_defect_6_a_small_worst_case_still_gets_five_minutes_of_margin() -> None:
    assert worst_case.margin_seconds(1000) == 300
    assert worst_case.margin_seconds(3000) == 300
    assert worst_case.margin_seconds(3001) == 301


def test_defect_6_every_workflow_task_deploys_the_timeout_the_worst_case_counts() -> None:
    assert {spec.name: spec.timeout_seconds for spec in WORKFLOW_TASKS} == dict(
        worst_case.TASK_TIMEOUT_SECONDS
    )


def test_defect_6_zero_retries_drop_their_clause() -> None:
    clauses = worst_case.task_retry_clauses(
        RetrySettings(interval_seconds=2, max_attempts=0, backoff_rate=2.0)
    )
    assert worst_case.TRANSIENT_ERRORS not in [clause.errors for clause in clauses]
    assert len(clauses) == 4  # service errors, ledger contention, EC2 state, Lambda timeouts


# -- refusals ------------------------------------------------------------------------------------


def test_defect_6_lock_ttl_equal_to_drain_plus_recovery_is_refused_with_the_numbers() -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse(lockTtlSeconds=900 + 900)
    message = str(refused.value)
    assert message.startswith("nodeheal.lockTtlSeconds (1800) must be at least 33468: ")
    assert "hold the lock for 30425 s (8 h 27 min 5 s)" in message
    assert "margin of 3043 s (10%, at least 300 s)" in message
    assert "drain 7066 + force drain 3078 + reboot 1812 + recovery 3126" in message
    assert message.endswith("read-capacity 658 + a contender that never takes over 1115 = 30425 s")
    # The smallest accepted value is exactly the one the message names.
    assert (
        parse(lockTtlSeconds=33_468, workflow={"timeoutMinutes": 1320}).remediation.lock_ttl_seconds == 33_468
    )
    with pytest.raises(ConfigurationError, match=r"\(33467\) must be at least 33468"):
        parse(lockTtlSeconds=33_467)


def test_defect_6_day_long_confirmation_forces_a_bigger_ttl() -> None:
    day_long = {"conditionRules": {"GPUProblem": {"action": "replace", "confirmSeconds": 86_400}}}
    # 30425 - 600 + 86400 = 116225 s held at worst; + 11623 s (10 %) = 127848.
    for policy in (day_long, {"nodePools": {"gpu": day_long}}):
        with pytest.raises(
            ConfigurationError, match=r"lockTtlSeconds \(34200\) must be at least 127848: .*116225 s"
        ):
            parse(policy=policy)
        with pytest.raises(ConfigurationError, match=r"timeoutMinutes \(1320\) must be at least 4532"):
            parse(policy=policy, lockTtlSeconds=127_848)
        config = parse(policy=policy, lockTtlSeconds=127_848, workflow={"timeoutMinutes": 4532})
        assert worst_case.holding_worst_case(config.remediation).seconds("confirmation") == 86_400


def test_defect_6_workflow_timeout_below_the_worst_case_is_refused() -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse(workflow={"timeoutMinutes": 1230})
    message = str(refused.value)
    assert message.startswith("nodeheal.workflow.timeoutMinutes (1230) must be at least 1242: ")
    assert "one execution can run 67733 s (18 h 48 min 53 s)" in message
    assert "margin of 6774 s" in message
    assert "admit 3078 + wait behind the lock holder 34230 + hold the lock 30425 = 67733 s" in message
    assert parse(workflow={"timeoutMinutes": 1242}).workflow_timeout_minutes == 1242


def test_defect_6_a_longer_lock_ttl_needs_a_longer_workflow_timeout() -> None:
    # Waiting behind a holder lasts up to the TTL: 3078 + 72030 + 30425 = 105533 s, + 10554 s.
    with pytest.raises(ConfigurationError, match=r"timeoutMinutes \(1320\) must be at least 1935"):
        parse(lockTtlSeconds=72_000)


def test_defect_6_shipped_cdk_json_passes_with_its_margins() -> None:
    config = NodeHealConfig.from_cdk_context(SHIPPED)
    remediation = config.remediation
    assert worst_case.holding_worst_case(remediation).total_seconds == 30_425
    assert (
        worst_case.required_lock_ttl_seconds(remediation) == 33_468 <= remediation.lock_ttl_seconds == 34_200
    )
    assert worst_case.execution_worst_case(remediation).total_seconds == 67_733
    assert (
        worst_case.required_workflow_timeout_minutes(remediation)
        == 1242
        <= config.workflow_timeout_minutes
        == 1320
    )
    assert worst_case.remediation_bound(remediation).total_seconds == 600 + 30_425 + 360


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"drain": {"pollSeconds": 0}}, "nodeheal.drain.pollSeconds must be >= 1, got 0"),
        ({"reboot": {"pollSeconds": 0}}, "nodeheal.reboot.pollSeconds must be >= 1, got 0"),
        ({"lockWaitPollSeconds": 0}, "nodeheal.lockWaitPollSeconds must be >= 1, got 0"),
        ({"lockWaitPollSeconds": 3601}, "nodeheal.lockWaitPollSeconds must be <= 3600"),
        ({"drain": {"forceGraceSeconds": 3601}}, "nodeheal.drain.forceGraceSeconds must be <= 3600"),
        (
            {"policy": {"conditionRules": {"GPUProblem": {"action": "replace", "confirmSeconds": 86_401}}}},
            "confirmSeconds must be <= 86400",
        ),
        (
            {"drain": {"doNotDisruptWaitSeconds": 900}},
            re.escape(
                "nodeheal.drain.doNotDisruptWaitSeconds (900) must be shorter than "
                "nodeheal.drain.timeoutSeconds (900), or 0"
            ),
        ),
        (
            # 60 + 120 + 240 + 480 + 960 = 1860 s of backoff for one task.
            {"retry": {"intervalSeconds": 60, "maxAttempts": 5, "backoffRate": 2.0}},
            re.escape("nodeheal.retry waits 1860 s in backoff over 5 retries (60 s x 2^k); at most 900 s"),
        ),
    ],
)
def test_defect_6_every_wait_is_bounded(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        parse(**overrides)


def test_defect_6_hold_of_zero_is_allowed_with_a_zero_drain_timeout() -> None:
    assert (
        parse(
            drain={"timeoutSeconds": 0, "doNotDisruptWaitSeconds": 0, "allowImmediateForce": True}
        ).remediation.drain.timeout_seconds
        == 0
    )


def test_defect_6_lock_wait_poll_defaults_to_30_seconds() -> None:
    assert parse().remediation.lock_wait_poll_seconds == 30
    assert parse(lockWaitPollSeconds=5).remediation.lock_wait_poll_seconds == 5
    assert RemediationSettings().to_json()["lockWaitPollSeconds"] == 30


def test_defect_6_running_execution_keeps_the_settings_it_started_with() -> None:
    # An execution started by a deployment from before this check carries a 2-hour lock TTL; the
    # new handlers must still run it to its end (and release the lock), not refuse its input.
    old = {**RemediationSettings().to_json(), "lockTtlSeconds": 7200}
    with pytest.raises(ConfigurationError, match="lockTtlSeconds"):
        worst_case.checked_settings(old)
    state = WorkflowState.parse(
        {
            "event": _event(),
            "settings": old,
            "execution": {"name": "e", "id": "arn:e", "startedAt": "2026-11-21T10:00:02Z"},
        }
    )
    assert state.settings.lock_ttl_seconds == 7200


def _event() -> dict[str, Any]:
    return {
        "schemaVersion": "1",
        "cluster": "training-on-eks",
        "node": {"name": "gpu-a", "uid": "u-1", "providerID": "aws:///us-west-2b/i-0abc", "labels": {}},
        "condition": {
            "type": "GPUProblem",
            "status": "True",
            "reason": "GPUHardwareError",
            "message": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            "lastTransitionTime": "2026-11-21T10:00:00Z",
        },
        "previous": {"status": "False", "reason": "GPUHealthy"},
        "observedAt": "2026-11-21T10:00:01Z",
        "resync": False,
    }


def test_defect_7_the_call_budgets_are_the_adapters_own_timeouts() -> None:
    """Task timeouts are computed from these; they must be the ones the adapters really use."""
    from nodeheal import deadline, runtime, steps
    from nodeheal.kube.client import DEFAULT_REQUEST_TIMEOUT

    assert sum(DEFAULT_REQUEST_TIMEOUT) == steps.KUBE_REQUEST_SECONDS
    assert runtime.AWS_CONNECT_TIMEOUT_SECONDS + runtime.AWS_READ_TIMEOUT_SECONDS == steps.AWS_CALL_SECONDS
    assert deadline.LAMBDA_RESERVE_SECONDS == steps.LAMBDA_RESERVE_SECONDS
