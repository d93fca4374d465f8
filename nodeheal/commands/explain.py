"""``nodeheal explain EVENT``: what NodeHeal would decide for an event or a Node, and why.

EVENT is a file or ``-`` (stdin) holding one of:

* a contract-v1 event ``detail`` (what the exporter publishes);
* a full EventBridge event (``detail-type`` + ``detail``), as the archive or a rule target sees it;
* a Kubernetes Node (``kubectl get node X -o json``): every condition on it is explained.

The decision is the real policy (:func:`nodeheal.policy.decide`) with an empty history: explain
answers "what does this signal mean under this policy", not "what will happen to this node now"
(that also depends on the ledger: past reboots, attempts, budgets, the breaker).

Without EVENT, explain prints the configuration's timing (:mod:`nodeheal.worst_case`): the worst case
of one execution holding a node's lock and the lock TTL it needs, the worst case of a whole
execution and the workflow timeout it needs, and the bound of invariant I2, each term by term.

The settings are ``--config``'s, else ``./cdk.json``'s when it holds ``context.nodeheal``, else
the built-in defaults, as for every command that reads a configuration; stderr says which.

By default the answer is a summary for a person: the decision, the reason, the timing and what the
workflow would do next. ``--json`` prints the JSON document instead; the summary is rendered from
that same document, so both always say the same thing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeheal import contracts, worst_case
from nodeheal.actions import Action, Mode
from nodeheal.commands.output import print_fields, print_json, print_table
from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings
from nodeheal.deploy_config import FILE_CONTEXT_PATH, ConfigSource, NodeHealConfig, config_source
from nodeheal.errors import InvalidEventError
from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    NodeConditionEvent,
    unwrap_eventbridge_envelope,
)
from nodeheal.kube_views import LiveNode
from nodeheal.policy.decide import Decision, NodeHistory, decide
from nodeheal.timestamps import utc_now


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain the decision for an event or a Node, or the configuration's timing",
        description=(
            "Summarize the decision NodeHeal's policy makes for an event (contract v1 detail or a full "
            "EventBridge event) or for every condition of a Node (kubectl get node X -o json): the "
            "action, the reason, the confirmation time and what the workflow would do next. History is "
            "assumed empty (no earlier reboots or attempts). Without EVENT, show the configuration's "
            "worst-case durations, the lock TTL and workflow timeout they need, and the bound of "
            "invariant I2 (confirmation + worst case + finalizer latency). --json prints the same as JSON."
        ),
    )
    parser.add_argument(
        "event",
        metavar="EVENT",
        nargs="?",
        help="file with the event or Node JSON, or - for stdin; omit it to explain the timing",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help=(
            "cdk.json whose context.nodeheal holds the policy (default: ./cdk.json when it holds one, "
            "else the built-in defaults; stderr says which)"
        ),
    )
    parser.add_argument(
        "--mode",
        choices=[mode.value for mode in Mode],
        help="override the mode from the configuration (default: the configuration's)",
    )
    parser.add_argument("--json", action="store_true", help="print the explanation as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    source = config_source(args.config)
    settings = settings_of(source)
    mode = Mode(args.mode) if args.mode else settings.mode

    def say_which_settings() -> None:
        # Once there is an answer to go with it: an error comes first and alone on stderr.
        print(f"settings: {source.description}", file=sys.stderr)

    if args.event is None:
        timing_document = explain_timing(settings)
        say_which_settings()
        if args.json:
            print_json(timing_document)
        else:
            print_timing(timing_document)
        return 0
    document = _read_json(args.event)
    if isinstance(document, dict) and "detail-type" in document:
        detail_type = document["detail-type"]
        if detail_type != DETAIL_TYPE_CONDITION_CHANGED:
            raise InvalidEventError(
                f"explain understands {DETAIL_TYPE_CONDITION_CHANGED!r} events, "
                f"got detail-type {detail_type!r}"
            )
    payload = unwrap_eventbridge_envelope(document)
    if _looks_like_node(payload):
        explained = explain_node(payload, settings, mode)
        say_which_settings()
        if args.json:
            print_json(explained)
        else:
            print_node_view(explained, settings)
    else:
        result = explain_event(payload, settings, mode)
        say_which_settings()
        if args.json:
            print_json(result)
        else:
            print_event_view(result, settings)
    return 0


def settings_of(source: ConfigSource) -> RemediationSettings:
    """The remediation settings of a cdk.json (or the built-in defaults), after validating all of
    it as ``cdk synth`` does.

    The deployment keys (bus, rule, e-mails, VPC...) are checked too, not skipped: a file explain
    accepts is one the deployment accepts, and the rule's scope is part of what it returns.
    """
    if source.context is None:
        return RemediationSettings()
    return NodeHealConfig.from_cdk_context(source.context, FILE_CONTEXT_PATH).remediation


def explain_timing(settings: RemediationSettings) -> dict[str, Any]:
    """The worst cases of D5 and the I2 bound, each with its terms, and what they require."""
    holding = worst_case.holding_worst_case(settings)
    execution = worst_case.execution_worst_case(settings)
    return {
        "holding": {
            "what": "longest one execution holds a node's lock, from the Admit that takes it to the record",
            **holding.to_json(),
            "marginSeconds": worst_case.margin_seconds(holding.total_seconds),
            "lockTtlSeconds": settings.lock_ttl_seconds,
            "lockTtlMinimumSeconds": worst_case.required_lock_ttl_seconds(settings),
        },
        "execution": {
            "what": "longest one execution runs: waiting behind the node's lock holder, then holding it",
            **execution.to_json(),
            "marginSeconds": worst_case.margin_seconds(execution.total_seconds),
            "workflowTimeoutMinimumMinutes": worst_case.required_workflow_timeout_minutes(settings),
        },
        "i2Bound": {
            "what": (
                "longest a bad condition waits to be acted on while another execution holds its node: "
                "confirmation + the holder's worst case + finalizer latency"
            ),
            **worst_case.remediation_bound(settings).to_json(),
        },
    }


def explain_event(payload: Any, settings: RemediationSettings, mode: Mode) -> dict[str, Any]:
    event = _parse_checked(payload)
    labels = dict(event.node.labels)
    # The exporter sends the pool both as a label and as node.nodePool; a trimmed label map still
    # has the field, and per-pool overrides must not silently fall back to the global policy.
    if event.node.node_pool:
        labels.setdefault(settings.policy.node_pool_label, event.node.node_pool)
    decision = _decide(event.condition, labels, settings, mode)
    return {
        **decision.to_json(),
        "mode": mode.value,
        "cluster": event.cluster,
        "node": event.node.name,
        "condition": {"type": event.condition.type, "status": event.condition.status},
    }


def _parse_checked(payload: Any) -> NodeConditionEvent:
    """The event, parsed as ingest parses it, and checked against the contract schema, which names
    every problem at once where the parser stops at the first: a producer fixes them in one go."""
    schema = contracts.condition_changed_schema(payload)
    problems = contracts.violations(schema, payload) if isinstance(payload, dict) else []
    where = f"nodeheal/contracts/{schema}"
    try:
        event = NodeConditionEvent.from_detail(payload)
    except InvalidEventError as exc:
        if problems:
            raise InvalidEventError(f"{exc}; every problem against {where}: {'; '.join(problems)}") from None
        raise
    if problems:
        raise InvalidEventError(
            f"the event does not meet the contract ({where}), though ingest would accept it: "
            + "; ".join(problems)
        )
    return event


def explain_node(
    payload: Mapping[str, Any], settings: RemediationSettings, mode: Mode
) -> list[dict[str, Any]]:
    try:
        node = LiveNode.from_api(payload)
    except InvalidEventError as exc:
        raise InvalidEventError(f"Node status.conditions: {exc}") from None
    except (AttributeError, TypeError, ValueError) as exc:
        raise InvalidEventError(f"not a valid Node object: {exc}") from None
    explained = []
    for condition in node.conditions.values():
        decision = _decide(condition, node.labels, settings, mode)
        explained.append(
            {
                **decision.to_json(),
                "mode": mode.value,
                "node": node.name,
                "condition": {"type": condition.type, "status": condition.status},
            }
        )
    return explained


# -- the summary for a person ---------------------------------------------------------------------
# Rendered from the JSON documents above (never from a second computation), so the summary and
# ``--json`` cannot disagree; what the workflow does next is the state machine's shape
# (nodeheal/cdk/workflow_definition.py) with this configuration's numbers.

#: Width the reason and the next steps are wrapped to.
_WRAP = 100


def print_event_view(explained: Mapping[str, Any], settings: RemediationSettings) -> None:
    """What :func:`explain_event` returned, for a person."""
    condition = explained["condition"]
    print(
        f"{condition['type']}={condition['status']} on {explained['node']} (cluster {explained['cluster']})"
    )
    print_fields([*_decision_fields(explained, settings), _history_field(explained["node"])], wrap=_WRAP)


def print_node_view(explained: list[dict[str, Any]], settings: RemediationSettings) -> None:
    """What :func:`explain_node` returned: one line per condition, then the ones that call for something."""
    if not explained:
        print("the Node has no conditions: nothing to decide")
        return
    node, mode = explained[0]["node"], explained[0]["mode"]
    print(f"{node}: {len(explained)} condition(s), mode {mode}, history assumed empty")
    print_table(
        [
            {
                "condition": f"{item['condition']['type']}={item['condition']['status']}",
                "action": item["action"],
                "planned": item["plannedAction"],
                "confirm": _confirm_column(item),
                "signal": item["signal"],
            }
            for item in explained
        ],
        [
            ("condition", "CONDITION"),
            ("action", "DECISION"),
            ("planned", "PLANNED"),
            ("confirm", "CONFIRM"),
            ("signal", "SIGNAL"),
        ],
    )
    acting = [item for item in explained if Action(item["plannedAction"]) is not Action.NONE]
    if not acting:
        print("no condition calls for anything: NodeHeal leaves this node alone")
        return
    for item in acting:
        condition = item["condition"]
        print(f"\n{condition['type']}={condition['status']}:")
        print_fields(_decision_fields(item, settings), wrap=_WRAP, indent="  ")
    print()
    fields = [_history_field(node)]
    if len(acting) > 1:
        fields.append(
            (
                "together",
                "each bad condition is its own execution and one node has one lock: a more severe, "
                "confirmed fault takes the node over from the holder, the others wait behind it",
            )
        )
    print_fields(fields, wrap=_WRAP)


def _confirm_column(item: Mapping[str, Any]) -> str:
    seconds = int(item["confirmSeconds"])
    return worst_case.format_duration(seconds) if seconds and item["action"] != Action.NONE.value else "-"


def _decision_fields(explained: Mapping[str, Any], settings: RemediationSettings) -> list[tuple[str, Any]]:
    action, planned = Action(explained["action"]), Action(explained["plannedAction"])
    mode = Mode(explained["mode"])
    decision = action.value if action is planned else f"{action.value} (planned: {planned.value})"
    fields: list[tuple[str, Any]] = [
        ("decision", f"{decision}, mode {mode.value}"),
        ("reason", explained["reason"]),
        ("signal", explained["signal"] + ("" if explained["xid"] is None else f" (Xid {explained['xid']})")),
        ("timing", _timing_text(action, int(explained["confirmSeconds"]), settings)),
        ("next", next_steps(action, planned, mode, settings)),
    ]
    if explained.get("escalated"):
        fields.insert(1, ("escalated", "yes"))
    return fields


def _history_field(node: str) -> tuple[str, str]:
    return (
        "history",
        "assumed empty: an earlier reboot of the instance (escalation to replace) or the attempt cap "
        f"can change the decision; `nodeheal history --node {node}` shows them",
    )


def _timing_text(action: Action, confirm_seconds: int, settings: RemediationSettings) -> str:
    if action is Action.NONE:
        return "nothing to wait for"
    if confirm_seconds:
        text = (
            f"waits until the condition has been bad for {worst_case.format_duration(confirm_seconds)} "
            f"(confirmSeconds {confirm_seconds}, from its lastTransitionTime), then acts only if it still is"
        )
    else:
        text = "acts at once (this signal has no confirmation time)"
    if action.mutates_cluster:
        holding = worst_case.holding_worst_case(settings)
        text += (
            f"; no remediation holds a node longer than {holding.to_json()['total']} in the worst case "
            "(`nodeheal explain` without EVENT shows the terms)"
        )
    return text


def next_steps(action: Action, planned: Action, mode: Mode, settings: RemediationSettings) -> str:
    """What the workflow does for ``action`` under this configuration, as a sentence."""
    drain, reboot = settings.drain, settings.reboot
    if drain.on_timeout == "force":
        leftover = f"then force-delete what is left ({drain.force_grace_seconds} s grace)"
    else:
        leftover = "then stop there, cordoned and tainted, and alert (drain.onTimeout abort)"
    evict = (
        "evict its pods through the Eviction API, respecting PodDisruptionBudgets, for up to "
        f"{worst_case.format_duration(drain.timeout_seconds)} (drain.timeoutSeconds), {leftover}"
    )
    steps = {
        Action.NONE: "touch nothing: the decision is recorded in the ledger, nobody is notified",
        Action.ALERT: "touch nothing: notify the SNS topic (severity action-required) for a person to look",
        Action.CORDON: (
            "cordon the node (no new pods land on it; running ones stay) and notify; "
            "a person decides the rest"
        ),
        Action.REBOOT: (
            f"cordon the node, {evict}; reboot the EC2 instance and wait up to "
            f"{worst_case.format_duration(reboot.recovery_timeout_seconds)} "
            "(reboot.recoveryTimeoutSeconds) for a new boot, Ready and a healthy condition, then uncordon "
            "(not recovered: terminate it, so a new node replaces it)"
        ),
        Action.REPLACE: (
            f"cordon the node, {evict}; terminate the EC2 instance, and Karpenter (or the node group) "
            "provisions a new node"
        ),
    }
    text = steps[action]
    if action.mutates_cluster:
        text = (
            "once Admit has re-read the live node (still bad, same instance) and taken its lock and a "
            "budget slot (refused while the circuit breaker is open or the cluster is paused): " + text
        )
    elif action is Action.ALERT:
        text = "once Admit has re-read the live node (still bad): " + text
    if action is planned:
        return text
    if mode is Mode.DRY_RUN and action is Action.NONE:
        # Recorded as the dry-run outcome, which is notified (info) so the rollout can be reviewed.
        return (
            "touch nothing: the decision is recorded as dry-run and notified (info); in full mode it "
            f"would {steps[planned]}"
        )
    if mode is Mode.CORDON_ONLY and action is Action.CORDON:
        return f"{text} (cordon-only; full mode would {planned.value})"
    return f"{text} ({planned.value} was planned; the reason says why not)"


def print_timing(document: Mapping[str, Any]) -> None:
    """What :func:`explain_timing` returned, for a person."""
    print(
        "Worst cases under this configuration: strict bounds, assuming every Lambda attempt runs to its "
        "timeout and every retry is used (a remediation typically takes minutes)."
    )
    holding, execution, bound = document["holding"], document["execution"], document["i2Bound"]
    _print_breakdown("Holding a node's lock", holding)
    # A configuration whose lock TTL falls short never gets here: loading it refused it already.
    print(
        f"lockTtlSeconds {holding['lockTtlSeconds']} (at least {holding['lockTtlMinimumSeconds']}: "
        f"the worst case + a margin of {holding['marginSeconds']} s)"
    )
    _print_breakdown("One whole execution", execution)
    print(
        f"workflow.timeoutMinutes must be at least {execution['workflowTimeoutMinimumMinutes']} "
        f"(the worst case + a margin of {execution['marginSeconds']} s)"
    )
    _print_breakdown("Invariant I2", bound)


def _print_breakdown(title: str, section: Mapping[str, Any]) -> None:
    print(f"\n{title}: {section['total']} ({section['totalSeconds']} s)")
    print(f"  {section['what']}")
    print_table(
        [{"name": t["name"], "seconds": t["seconds"], "detail": t["detail"]} for t in section["terms"]],
        [("name", "TERM"), ("seconds", "SECONDS"), ("detail", "HOW")],
    )


def _decide(
    condition: Condition, labels: Mapping[str, str], settings: RemediationSettings, mode: Mode
) -> Decision:
    return decide(
        condition,
        labels=labels,
        history=NodeHistory(),
        policy=settings.policy,
        mode=mode,
        now=utc_now(),
    )


def _looks_like_node(payload: Any) -> bool:
    if not isinstance(payload, dict):
        return False
    kind = payload.get("kind")
    if kind is not None:
        if kind == "Node":
            return True
        if "schemaVersion" not in payload:
            raise InvalidEventError(f"expected a Node or a NodeHeal event, got a Kubernetes {kind}")
        return False
    # ``kubectl get -o json`` always sets kind; a bare object with metadata and status is a Node
    # copied out of something else (a watch event, a fixture), never a contract-v1 event.
    return "schemaVersion" not in payload and "metadata" in payload and "status" in payload


def _read_json(source: str) -> Any:
    if source == "-":
        text = sys.stdin.read()
        where = "stdin"
    else:
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidEventError(f"cannot read {source}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise InvalidEventError(f"{source} is not UTF-8 text") from None
        where = source
    if not text.strip():
        raise InvalidEventError(f"{where} is empty; expected an event or Node as JSON")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidEventError(f"{where} is not valid JSON: {exc}") from None
