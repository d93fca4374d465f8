"""Fault injection's command: injected_faults has the payload, kube.fault_injection sends the requests.

``nodeheal inject`` simulates a GPU fault at the Node condition or at the detector, to test end to
end. Three ways in (``--via``; :mod:`nodeheal.injected_faults` has the details and the sources):

* ``condition`` (default): patch the condition as NPD would (below). Warned: NPD re-sends its own
  view every heartbeat and reverts it;
* ``kmsg``: a short-lived privileged pod on the node writes the driver's ``NVRM: Xid`` line into the
  kernel log, so NPD's log monitor raises ``GPUProblem`` itself; the pod is always deleted;
* ``dcgm``: ``dcgmi test --inject`` in the node's dcgm-exporter pod through ``pods/exec`` (seed
  000's method), for the EKS node monitoring agent, when it reads that host engine.

The requests themselves are :mod:`nodeheal.kube.fault_injection`'s; this module asks, prints and
explains. Each prints the *deployed* policy's decision for the condition the detector is expected to set,
read from the stack's state machine (as ``nodeheal doctor`` does); when it cannot be read, the
built-in defaults, and it says so. The tests prove the requests, not the detector's reaction.

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

from nodeheal import injected_faults as detector
from nodeheal.commands.aws_access import DEFAULT_STACK, REGION_HELP, STATE_MACHINE_OUTPUT
from nodeheal.commands.kube_access import add_kube_arguments, kube_transport
from nodeheal.commands.output import confirm, print_json
from nodeheal.conditions import CONDITION_STATUSES, Condition
from nodeheal.config import RemediationSettings
from nodeheal.errors import ConfigurationError, InvalidEventError, NodeHealError
from nodeheal.kube import fault_injection as kube_injection
from nodeheal.policy.catalog import lookup
from nodeheal.timestamps import format_timestamp, utc_now

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


VIA_CONDITION = "condition"
VIA_KMSG = "kmsg"
VIA_DCGM = "dcgm"
VIAS = (VIA_CONDITION, VIA_KMSG, VIA_DCGM)
#: The label dcgm-exporter's Helm chart and the GPU operator put on its pods.
DCGM_EXPORTER_SELECTOR = "app.kubernetes.io/name=dcgm-exporter"
#: The EKS node monitoring agent's "well known" Xids: a DCGM XID policy violation with one of these
#: sets ``AcceleratedHardwareReady=False`` with reason ``NvidiaXID<n>Error``; any other Xid is a
#: ``NvidiaXID<n>Warning`` Event only (``WellKnownXidCodes`` in
#: https://github.com/aws/eks-node-monitoring-agent/blob/51af5494fde6d2ed4629df2ed9f847ae800957fd/monitors/nvidia/dcgm/dcgm_policies.go).
NMA_FATAL_XIDS = frozenset(
    {46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158}
)
NMA_CONDITION = "AcceleratedHardwareReady"


@dataclass(frozen=True, slots=True)
class PolicySource:
    """The settings a decision is explained with, and where they came from, for the person."""

    settings: RemediationSettings
    origin: str
    deployed: bool


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
    if args.via != VIA_CONDITION and (args.condition or args.reason or args.status):
        raise ConfigurationError(
            f"--via {args.via} injects at the detector, which sets the condition itself: give --xid"
            + (" or --ecc-dbe" if args.via == VIA_DCGM else "")
            + ", not --condition/--status/--reason"
        )
    if args.ecc_dbe is not None:
        if args.via != VIA_DCGM:
            raise ConfigurationError("--ecc-dbe is a DCGM field: use it with --via dcgm")
        if args.xid is not None:
            raise ConfigurationError("give --xid or --ecc-dbe, not both")
        return Injection(
            NMA_CONDITION,
            "False",
            "NvidiaDoubleBitError",
            f"detected {args.ecc_dbe} Nvidia Double Bit error(s) on location (injected)",
        )
    if args.via == VIA_DCGM:
        if args.xid is None:
            raise ConfigurationError("--via dcgm needs --xid or --ecc-dbe")
        if args.xid not in NMA_FATAL_XIDS:
            raise InvalidEventError(
                f"Xid {args.xid} sets no condition: the EKS node monitoring agent records an Xid outside its "
                f"well-known list as a NvidiaXID{args.xid}Warning Event only"
            )
        return Injection(
            NMA_CONDITION,
            "False",
            f"NvidiaXID{args.xid}Error",
            f"detected XID-{args.xid} on the instance, review kernel logs for additional information.",
        )
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
        if args.via == VIA_KMSG and args.message:
            raise ConfigurationError("--via kmsg writes the driver's own line for --xid; drop --message")
        return Injection(GPU_CONDITION, args.status or "True", reason, args.message or xid_message(args.xid))
    if args.via == VIA_KMSG:
        raise ConfigurationError("--via kmsg needs --xid")
    if not (args.condition and args.status and args.reason):
        raise ConfigurationError("give --xid, or all of --condition, --status and --reason")
    return Injection(args.condition, args.status, args.reason, args.message or "")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "inject",
        help="simulate a GPU fault: at the Node condition, in the kernel log, or in DCGM (end-to-end test)",
        description=(
            "Simulate a GPU fault on a node. --via condition (default) patches the Node's status the way "
            "node-problem-detector does; NPD reverts it on its next heartbeat. --via kmsg writes the "
            "driver's 'NVRM: Xid' line into the node's kernel log through a short-lived privileged pod, "
            "so NPD raises GPUProblem itself. --via dcgm runs 'dcgmi test --inject' in the node's "
            "dcgm-exporter pod (pods/exec). Prints the deployed policy's decision for the condition the "
            "detector is expected to set. With NodeHeal deployed this starts a real remediation: the "
            "node may be cordoned, drained and terminated."
        ),
    )
    parser.add_argument("--cluster", required=True, help="cluster name (the EKS cluster with --eks)")
    parser.add_argument("--node", required=True, help="node name")
    parser.add_argument(
        "--via",
        choices=VIAS,
        default=VIA_CONDITION,
        help="where the fault enters: the Node condition (default), the kernel log, or DCGM",
    )
    fault = parser.add_argument_group(
        "fault: --xid (or --ecc-dbe with --via dcgm), or --condition/--status/--reason with --via condition"
    )
    fault.add_argument("--xid", type=int, help="NVIDIA Xid to simulate (e.g. 79)")
    fault.add_argument(
        "--ecc-dbe",
        type=int,
        metavar="COUNT",
        help="with --via dcgm: double-bit ECC errors to inject (DCGM_FI_DEV_ECC_DBE_VOL_DEV, field 319)",
    )
    fault.add_argument("--condition", help="condition type, e.g. GPUProblem, KernelDeadlock")
    fault.add_argument("--status", choices=sorted(CONDITION_STATUSES), help="condition status")
    fault.add_argument("--reason", help="condition reason (CamelCase, as detectors write it)")
    fault.add_argument("--message", help="condition message (default with --xid: the driver's log line)")
    kmsg = parser.add_argument_group("--via kmsg")
    kmsg.add_argument(
        "--namespace",
        default="kube-system",
        help="namespace of the injector pod; it must admit privileged pods (default: kube-system)",
    )
    kmsg.add_argument(
        "--image", default=detector.DEFAULT_KMSG_IMAGE, help="injector image (needs sh, printf)"
    )
    kmsg.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the injector pod, or with --via dcgm the exec, to complete (default: 120)",
    )
    dcgm = parser.add_argument_group("--via dcgm")
    dcgm.add_argument("--gpu", type=int, default=0, help="DCGM GPU id to inject on (default: 0)")
    dcgm.add_argument(
        "--dcgm-selector",
        default=DCGM_EXPORTER_SELECTOR,
        help=f"label selector of the dcgm-exporter pods (default: {DCGM_EXPORTER_SELECTOR})",
    )
    dcgm.add_argument("--dcgm-namespace", help="namespace of the dcgm-exporter pods (default: all)")
    dcgm.add_argument("--dcgm-container", help="container to exec in (default: the pod's only one)")
    dcgm.add_argument(
        "--dcgm-host",
        metavar="HOST[:PORT]",
        default="",
        help="host engine dcgmi injects into (its --host; default: localhost:5555 in the exporter pod)",
    )
    add_kube_arguments(parser)
    access = parser.add_argument_group("AWS: --eks, and the deployed policy")
    access.add_argument("--region", help=REGION_HELP)
    access.add_argument("--profile", help="AWS profile (default: AWS_PROFILE / the default chain)")
    access.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help=f"stack whose {STATE_MACHINE_OUTPUT} holds the deployed policy (default: {DEFAULT_STACK})",
    )
    access.add_argument(
        "--state-machine", metavar="ARN", help="remediation state machine (default: the stack's)"
    )
    access.add_argument(
        "--builtin-policy",
        action="store_true",
        help="explain with NodeHeal's built-in defaults instead of reading the deployed settings",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    injection = injection_for(args)
    api = kube_transport(args, args.cluster)
    from nodeheal.kube_views import LiveNode

    node = kube_injection.read_node(api, args.node, args.cluster)
    current = next(
        (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == injection.type),
        None,
    )
    before = (
        f"{injection.type}={current.get('status')} ({current.get('reason', '')})" if current else "absent"
    )
    if args.via == VIA_KMSG:
        what = (
            f"Write an Xid {args.xid} line into the kernel log of node {args.node} (a privileged pod in "
            f"{args.namespace})"
        )
    elif args.via == VIA_DCGM:
        what = f"Inject into DCGM on node {args.node} ({_dcgm_fault(args)}, GPU {args.gpu})"
    else:
        what = f"Set {injection.type}={injection.status} ({injection.reason}) on node {args.node}"
    question = (
        f"{what} of cluster {args.cluster} (now {before})? With NodeHeal deployed this can cordon, drain "
        "and replace the node."
    )
    if not confirm(question, assume_yes=args.yes):
        print("cancelled; nothing changed", file=sys.stderr)
        return 1
    now = format_timestamp(utc_now())
    result: dict[str, Any] = {"cluster": args.cluster, "node": args.node, "via": args.via}
    if args.via == VIA_CONDITION:
        patch = injection.patch(current, now)
        patched = kube_injection.set_condition(api, args.node, patch)
        # After the write, so a refused or failed injection stays one line of error.
        print(detector.CONDITION_REVERT_WARNING, file=sys.stderr)
        live = LiveNode.from_api(patched)
        expected = live.conditions.get(injection.type)
        labels = live.labels
        result.update(
            condition=patch["status"]["conditions"][0],
            previous=current,
            transitioned=current is None or current.get("status") != injection.status,
        )
    else:
        labels = LiveNode.from_api(node).labels
        expected = Condition(injection.type, injection.status, injection.reason, injection.message)
        if args.via == VIA_KMSG:
            result["kmsg"] = kube_injection.write_kmsg(
                api,
                node=args.node,
                namespace=args.namespace,
                image=args.image,
                line=injection.message,
                timeout=args.timeout,
                warn=_warn,
            )
        else:
            result["dcgm"] = kube_injection.inject_dcgm(
                api,
                node=args.node,
                target=kube_injection.DcgmTarget(
                    selector=args.dcgm_selector,
                    namespace=args.dcgm_namespace,
                    container=args.dcgm_container,
                    host=args.dcgm_host,
                ),
                gpu=args.gpu,
                xid=args.xid,
                ecc_dbe=args.ecc_dbe,
                timeout=args.timeout,
            )
        result["expected"] = {
            "type": expected.type,
            "status": expected.status,
            "reason": expected.reason,
            "message": expected.message,
        }
    source = policy_source(args)
    decision = _explain(expected, labels, source.settings)
    result["decision"] = decision
    result["policy"] = {"deployed": source.deployed, "origin": source.origin}
    if args.json:
        print_json(result)
        return 0
    if args.via == VIA_CONDITION:
        condition = result["condition"]
        print(f"{args.node}: {condition['type']}={condition['status']} ({condition['reason']}) set at {now}")
        if not result["transitioned"]:
            print("  the status did not change: no transition, so the exporter publishes nothing new")
    elif args.via == VIA_KMSG:
        kmsg = result["kmsg"]
        print(
            f"{args.node}: wrote to /dev/kmsg through pod {kmsg['namespace']}/{kmsg['pod']} ({kmsg['phase']})"
        )
        print(f"  line: {kmsg['line']}")
        print(
            f"  node-problem-detector should set {injection.type}={injection.status} ({injection.reason}); "
            "this command does not wait for it"
        )
    else:
        dcgm = result["dcgm"]
        command = " ".join(dcgm["command"])
        print(f"{args.node}: {command} in pod {dcgm['namespace']}/{dcgm['pod']}: {dcgm['status']}")
        print(
            f"  the EKS node monitoring agent, if it reads this host engine, should set {injection.type}="
            f"{injection.status} ({injection.reason}); this command does not wait for it"
        )
    print(f"  NodeHeal's policy ({source.origin}): {decision['action']} - {decision['reason']}")
    print(f"  follow it with: nodeheal history --cluster {args.cluster} --node {args.node} --since 1h")
    return 0


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _dcgm_fault(args: argparse.Namespace) -> str:
    field, value = detector.dcgm_injection(args.xid, args.ecc_dbe)
    return f"{field.name} ({field.field_id}) = {value}"


def policy_source(args: argparse.Namespace) -> PolicySource:
    """The deployed settings (the state machine's ``Load settings`` state, as ``doctor`` and ``retry``
    read them), or the built-in defaults with the reason they are used."""
    if args.builtin_policy:
        return PolicySource(RemediationSettings(), "built-in defaults, as asked (--builtin-policy)", False)
    from nodeheal.commands.breaker import deployed_workflow

    try:
        workflow = deployed_workflow(args)
    except NodeHealError as exc:
        return PolicySource(
            RemediationSettings(),
            f"built-in defaults: the deployed settings could not be read ({exc})",
            False,
        )
    return PolicySource(
        workflow.settings,
        f"deployed settings of {workflow.arn}, mode {workflow.settings.mode.value}",
        True,
    )


def _explain(
    condition: Condition | None, labels: Mapping[str, str], settings: RemediationSettings
) -> dict[str, Any]:
    """The policy's decision for a first fault (no history), so the person knows what to expect."""
    from nodeheal.policy.decide import NodeHistory, decide

    if condition is None:
        return {"action": "unknown", "reason": "the condition is not on the patched node"}
    decision = decide(
        condition,
        labels=labels,
        history=NodeHistory(),
        policy=settings.policy,
        mode=settings.mode,
        now=utc_now(),
    )
    return decision.to_json()
