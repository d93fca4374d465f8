"""``nodeheal inject``: set a Node condition the way node-problem-detector does, to test end to end.

node-problem-detector's condition manager sends ``PATCH /api/v1/nodes/<name>/status`` with a
strategic merge patch ``{"status": {"conditions": [...]}}``: conditions merge by ``type``, so the
other conditions are untouched, ``lastHeartbeatTime`` is always the current time and
``lastTransitionTime`` moves only when the status changes. This command sends exactly that, so the
exporter, the rule and the workflow see what they would see for a real fault (the seed workflow's
"fault simulation", without a GPU to break).

``--xid N`` writes what NPD's GPU monitor (deploy/node-problem-detector/gpu-monitor.json) would set
for a kernel log line with that Xid; Xids it only records as Node Events are refused, because no
condition would ever carry them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from nodeheal.commands.kube_access import add_kube_arguments, kube_transport
from nodeheal.commands.output import confirm, print_json
from nodeheal.conditions import CONDITION_STATUSES, Condition
from nodeheal.config import RemediationSettings
from nodeheal.errors import ConfigurationError, InvalidEventError, NodeHealError
from nodeheal.policy.catalog import lookup
from nodeheal.timeutil import format_timestamp, utc_now

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
GPU_CONDITION = "GPUProblem"
#: Xid -> the reason NPD's GPU monitor sets on GPUProblem (its "permanent" rules, in file order).
#: tests/unit/test_inject_cli.py checks every entry against gpu-monitor.json.
XID_REASONS: Mapping[int, str] = {
    79: "GPUFellOffBus",
    48: "GPUDoubleBitECCError",
    95: "GPUUncontainedECCError",
    64: "GPURowRemapFailure",
    74: "NVLinkError",
    # The NVLink5 Xids with the driver's "Fatal" text (the Nonfatal ones are Events only).
    **dict.fromkeys((144, 145, 146, 147, 148, 149, 150), "NVLinkFatalError"),
    **dict.fromkeys((46, 62, 109, 110, 119, 120, 136, 140, 143, 154, 155, 156, 158), "GPUResetRequired"),
    151: "GPUNodeRestartRequired",
    **dict.fromkeys((54, 56, 57, 58, 61), "GPUHardwareError"),
}
#: What the driver appends after the Xid for the Xids whose decision reads the rest of the line.
_XID_DETAILS: Mapping[int, str] = {
    79: "GPU has fallen off the bus.",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    **dict.fromkeys(range(144, 151), "NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x021425c6 0x0 0x0 0x0 0x0 0x0)"),
}


class NodeNotFoundError(NodeHealError):
    """The node named on the command line does not exist in the cluster."""


@dataclass(frozen=True, slots=True)
class Injection:
    type: str
    status: str
    reason: str
    message: str

    def patch(self, current: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
        """The strategic merge patch NPD would send, given the node's current condition of this type."""
        changed = current is None or current.get("status") != self.status
        transition = now if changed or not current else str(current.get("lastTransitionTime") or now)
        return {
            "status": {
                "conditions": [
                    {
                        "type": self.type,
                        "status": self.status,
                        "reason": self.reason,
                        "message": self.message,
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": transition,
                    }
                ]
            }
        }


def xid_message(xid: int, pci: str = "0000:3b:00") -> str:
    """A kernel log line as the NVIDIA driver writes it for ``xid``."""
    entry = lookup(xid)
    detail = _XID_DETAILS.get(xid) or (entry.name if entry else "injected by nodeheal")
    return f"NVRM: Xid (PCI:{pci}): {xid}, pid='<unknown>', name=<unknown>, {detail}"


def injection_for(args: argparse.Namespace) -> Injection:
    if args.xid is not None:
        if args.condition or args.reason:
            raise ConfigurationError("--xid sets the condition and reason itself; do not combine them")
        reason = XID_REASONS.get(args.xid)
        if reason is None:
            raise InvalidEventError(
                f"Xid {args.xid} sets no condition: node-problem-detector's GPU monitor records it as a Node "
                "Event only (application-induced or informational). Use --condition/--status/--reason to "
                "set a condition anyway."
            )
        return Injection(GPU_CONDITION, args.status or "True", reason, args.message or xid_message(args.xid))
    if not (args.condition and args.status and args.reason):
        raise ConfigurationError("give --xid, or all of --condition, --status and --reason")
    return Injection(args.condition, args.status, args.reason, args.message or "")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "inject",
        help="set a Node condition as node-problem-detector would (end-to-end fault simulation)",
        description=(
            "Patch a Node's status the way node-problem-detector does (strategic merge on "
            "status.conditions; lastTransitionTime moves only when the status changes). With NodeHeal "
            "deployed this starts a real remediation: the node may be cordoned, drained and terminated."
        ),
    )
    parser.add_argument("--cluster", required=True, help="cluster name (the EKS cluster with --eks)")
    parser.add_argument("--node", required=True, help="node name")
    fault = parser.add_argument_group("fault (either --xid or --condition/--status/--reason)")
    fault.add_argument("--xid", type=int, help="NVIDIA Xid to simulate on GPUProblem (e.g. 79)")
    fault.add_argument("--condition", help="condition type, e.g. GPUProblem, KernelDeadlock")
    fault.add_argument("--status", choices=sorted(CONDITION_STATUSES), help="condition status")
    fault.add_argument("--reason", help="condition reason (CamelCase, as detectors write it)")
    fault.add_argument("--message", help="condition message (default with --xid: the driver's log line)")
    add_kube_arguments(parser)
    access = parser.add_argument_group("AWS, with --eks")
    access.add_argument("--region", help="AWS region with --eks")
    access.add_argument("--profile", help="AWS profile with --eks")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    injection = injection_for(args)
    api = kube_transport(args, args.cluster)
    from nodeheal.kube.client import expect_success, request_json
    from nodeheal.kube.model import LiveNode

    path = f"/api/v1/nodes/{quote(args.node, safe='')}"
    response = request_json(api, "GET", path, action=f"get node {args.node}")
    if response.status == 404:
        raise NodeNotFoundError(f"node {args.node} does not exist in cluster {args.cluster}")
    node = expect_success(response, action=f"get node {args.node}")
    current = next(
        (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == injection.type),
        None,
    )
    before = (
        f"{injection.type}={current.get('status')} ({current.get('reason', '')})" if current else "absent"
    )
    question = (
        f"Set {injection.type}={injection.status} ({injection.reason}) on node {args.node} of cluster "
        f"{args.cluster} (now {before})? With NodeHeal deployed this can cordon, drain and replace the node."
    )
    if not confirm(question, assume_yes=args.yes):
        print("cancelled; nothing changed", file=sys.stderr)
        return 1
    now = format_timestamp(utc_now())
    patch = injection.patch(current, now)
    patched = expect_success(
        request_json(
            api,
            "PATCH",
            f"{path}/status",
            action=f"patch the status of node {args.node}",
            body=patch,
            content_type=STRATEGIC_MERGE_PATCH,
        ),
        action=f"patch the status of node {args.node}",
    )
    live = LiveNode.from_api(patched)
    decision = _explain(live.conditions.get(injection.type), live.labels)
    result = {
        "cluster": args.cluster,
        "node": args.node,
        "condition": patch["status"]["conditions"][0],
        "previous": current,
        "transitioned": current is None or current.get("status") != injection.status,
        "decision": decision,
    }
    if args.json:
        print_json(result)
    else:
        condition = result["condition"]
        print(f"{args.node}: {condition['type']}={condition['status']} ({condition['reason']}) set at {now}")
        if not result["transitioned"]:
            print("  the status did not change: no transition, so the exporter publishes nothing new")
        print(f"  NodeHeal's policy: {decision['action']} - {decision['reason']}")
        print(f"  follow it with: nodeheal history --cluster {args.cluster} --node {args.node} --since 1h")
    return 0


def _explain(condition: Condition | None, labels: Mapping[str, str]) -> dict[str, Any]:
    """The default policy's decision, so the person knows what to expect (explain does the same)."""
    from nodeheal.policy.decide import NodeHistory, decide

    if condition is None:
        return {"action": "unknown", "reason": "the condition is not on the patched node"}
    settings = RemediationSettings()
    decision = decide(
        condition,
        labels=labels,
        history=NodeHistory(),
        policy=settings.policy,
        mode=settings.mode,
        now=utc_now(),
    )
    return decision.to_json()
