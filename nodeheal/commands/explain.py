"""``nodeheal explain EVENT``: what NodeHeal would decide for an event or a Node, and why.

EVENT is a file or ``-`` (stdin) holding one of:

* a contract-v1 event ``detail`` (what the exporter publishes);
* a full EventBridge event (``detail-type`` + ``detail``), as the archive or a rule target sees it;
* a Kubernetes Node (``kubectl get node X -o json``): every condition on it is explained.

The decision is the real policy (:func:`nodeheal.policy.decide`) with an empty history: explain
answers "what does this signal mean under this policy", not "what will happen to this node now"
(that also depends on the ledger: past reboots, attempts, budgets, the breaker).

Without EVENT, explain prints the configuration's timing (:mod:`nodeheal.timing`): the worst case
of one execution holding a node's lock and the lock TTL it needs, the worst case of a whole
execution and the workflow timeout it needs, and the bound of invariant I2, each term by term.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeheal import contracts, timing
from nodeheal.actions import Mode
from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings
from nodeheal.deploy_config import load_cdk_json
from nodeheal.errors import InvalidEventError
from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    NodeConditionEvent,
    unwrap_eventbridge_envelope,
)
from nodeheal.kube.model import LiveNode
from nodeheal.policy.decide import Decision, NodeHistory, decide
from nodeheal.timeutil import utc_now


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain the decision for an event or a Node, or the configuration's timing",
        description=(
            "Print, as JSON, the decision NodeHeal's policy makes for an event (contract v1 detail or a "
            "full EventBridge event) or for every condition of a Node (kubectl get node X -o json). "
            "History is assumed empty (no earlier reboots or attempts). Without EVENT, print the "
            "configuration's worst-case durations, the lock TTL and workflow timeout they need, and "
            "the bound of invariant I2 (confirmation + worst case + finalizer latency)."
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
        help="cdk.json whose context.nodeheal holds the policy (default: built-in defaults)",
    )
    parser.add_argument(
        "--mode",
        choices=[mode.value for mode in Mode],
        help="override the mode from the configuration (default: the configuration's, else full)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config) if args.config else RemediationSettings()
    mode = Mode(args.mode) if args.mode else settings.mode
    if args.event is None:
        print(json.dumps(explain_timing(settings), indent=2))
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
    result: Any
    if _looks_like_node(payload):
        result = explain_node(payload, settings, mode)
    else:
        result = explain_event(payload, settings, mode)
    print(json.dumps(result, indent=2))
    return 0


def load_settings(path: str) -> RemediationSettings:
    """The remediation settings of a cdk.json, after validating all of it as ``cdk synth`` does.

    The deployment keys (bus, rule, e-mails, VPC...) are checked too, not skipped: a file explain
    accepts is one the deployment accepts, and the rule's scope is part of what it returns.
    """
    return load_cdk_json(path).remediation


def explain_timing(settings: RemediationSettings) -> dict[str, Any]:
    """The worst cases of D5 and the I2 bound, each with its terms, and what they require."""
    holding = timing.holding_worst_case(settings)
    execution = timing.execution_worst_case(settings)
    return {
        "holding": {
            "what": "longest one execution holds a node's lock, from the Admit that takes it to the record",
            **holding.to_json(),
            "marginSeconds": timing.margin_seconds(holding.total_seconds),
            "lockTtlSeconds": settings.lock_ttl_seconds,
            "lockTtlMinimumSeconds": timing.required_lock_ttl_seconds(settings),
        },
        "execution": {
            "what": "longest one execution runs: waiting behind the node's lock holder, then holding it",
            **execution.to_json(),
            "marginSeconds": timing.margin_seconds(execution.total_seconds),
            "workflowTimeoutMinimumMinutes": timing.required_workflow_timeout_minutes(settings),
        },
        "i2Bound": {
            "what": (
                "longest a bad condition waits to be acted on while another execution holds its node: "
                "confirmation + the holder's worst case + finalizer latency"
            ),
            **timing.remediation_bound(settings).to_json(),
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
