"""What each NodeHeal component may do in a cluster: the Kubernetes RBAC rules, in one table.

One ClusterRole per remediation function (docs/architecture.md, D8), each bound to its own group
``<prefix>-<function>``; the stack's EKS access entry of a function's IAM role names that group
and nothing else. The rules list exactly the requests the code makes, named as kube-apiserver's
authorizer sees them (verb, API group, resource[/subresource]):

* ``nodeheal/kube/nodes.py``: ``get`` a node (every step re-reads it, the drain steps included),
  ``list`` nodes with a label selector (admit's pool health), ``patch`` a node (cordon,
  uncordon), ``delete`` a node (terminate, only with ``deleteNodeAfterTerminate``).
* ``nodeheal/kube/nodeclaims.py``: ``list`` and ``delete`` Karpenter NodeClaims (terminate, only
  with ``replace.method: delete-nodeclaim``).
* ``nodeheal/kube/pods.py``: ``list`` pods with ``fieldSelector=spec.nodeName`` (drain,
  force-drain) and, after a 409, ``fieldSelector=metadata.name`` (is the pod gone?), ``create`` on
  ``pods/eviction`` (drain), ``delete`` pods (force-drain; drain for delete-after-timeout pods).
* Every function may ``create`` Events (core and ``events.k8s.io``), so what it did to a node is
  visible in ``kubectl describe``.

Each step's rules are declared in its entry of the step registry (``nodeheal.steps``), and
:data:`KUBERNETES_RULES` collects them; terminate's optional roles and the exporter's are declared
here. The table feeds ``deploy/rbac/remediator.yaml`` (rendered by :func:`render_manifest`,
checked by ``tests/infrastructure/test_rbac.py``), the access construct, the README's RBAC table (checked by a
test) and the fake API server's authorizer, under which the workflow tests and the local pipeline
run every function with its own role: a verb the code needs but the table lacks is a 403 in a
test, and a verb the table grants but no scenario uses is reported.

The exporter's rules live in ``deploy/exporter`` (a kustomize base);
:data:`EXPORTER_ROLES` states them here for the authorizer, and a test holds the two equal.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from nodeheal.grants import PolicyRule
from nodeheal.steps import STEPS, TERMINATE

#: Default of cdk.json's ``kubernetesGroupPrefix``: groups and ClusterRoles are ``nodeheal-<function>``.
DEFAULT_GROUP_PREFIX = "nodeheal"
RBAC_API_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class FunctionRole:
    """A ClusterRole and the group bound to it (both named ``<prefix>-<function>[-<suffix>]``)."""

    function: str
    rules: tuple[PolicyRule, ...]
    #: Distinguishes an optional extra role of the same function.
    suffix: str = ""
    #: Empty for a role every deployment needs; otherwise when the stack puts the function in the
    #: group (the binding is harmless without members).
    only_when: str = ""

    def name(self, prefix: str = DEFAULT_GROUP_PREFIX) -> str:
        return f"{prefix}-{self.function}" + (f"-{self.suffix}" if self.suffix else "")


#: Step name -> its ClusterRole's rules, as the step registry (``nodeheal.steps``) declares them.
KUBERNETES_RULES: dict[str, tuple[PolicyRule, ...]] = {
    step.name: step.kubernetes_rules for step in STEPS if step.kubernetes
}

#: Granted to the terminate function only when ``deleteNodeAfterTerminate`` is true: the stack then
#: adds this group to its access entry.
NODE_DELETE = FunctionRole(
    TERMINATE.name,
    (
        PolicyRule(
            ("",),
            ("nodes",),
            ("delete",),
            "Delete the Node object (uid precondition) right after terminating its instance.",
        ),
    ),
    suffix="delete-nodes",
    only_when="deleteNodeAfterTerminate is true",
)

#: Granted to the terminate function only when ``replace.method`` is ``delete-nodeclaim``: the
#: stack then adds this group to its access entry (nodeheal/kube/nodeclaims.py makes the requests).
NODECLAIM_DELETE = FunctionRole(
    TERMINATE.name,
    (
        PolicyRule(
            ("karpenter.sh",),
            ("nodeclaims",),
            ("list", "delete"),
            "Find the NodeClaim whose status.providerID is the admitted instance's, then delete it "
            "(uid precondition) so Karpenter's termination finalizer terminates the instance.",
        ),
    ),
    suffix="nodeclaims",
    only_when='replace.method is "delete-nodeclaim"',
)


#: The person who runs ``nodeheal inject`` (an operator at the CLI, never a Lambda: the remediation
#: roles above stay without pods create or exec). Bound to the group ``<prefix>-fault-injector``
#: only where faults are injected on purpose; ``deploy/rbac/fault-injector.yaml`` renders it.
FAULT_INJECTOR = FunctionRole(
    "fault-injector",
    (
        PolicyRule(("",), ("nodes",), ("get",), "Read the node and its condition before injecting."),
        PolicyRule(
            ("",),
            ("nodes/status",),
            ("patch",),
            "--via condition: patch the condition as node-problem-detector does.",
        ),
        PolicyRule(
            ("",),
            ("pods",),
            ("create", "get", "delete"),
            "--via kmsg: the short-lived privileged pod that writes the kernel log line, read until it "
            "has run, then deleted.",
        ),
        PolicyRule(("",), ("pods",), ("list",), "--via dcgm: find the node's dcgm-exporter pod."),
        PolicyRule(
            ("",),
            ("pods/exec",),
            ("create", "get"),
            "--via dcgm: dcgmi test --inject in it. The WebSocket upgrade is a GET: authorized as get, "
            "and also as create where AuthorizePodWebsocketUpgradeCreatePermission is on (beta, 1.35).",
        ),
    ),
)


def render_fault_injector_manifest(prefix: str = DEFAULT_GROUP_PREFIX) -> str:
    """``deploy/rbac/fault-injector.yaml``: the operator role of ``nodeheal inject``."""
    header = (
        "# Generated by `python -m nodeheal.rbac --fault-injector` from nodeheal/rbac.py: do not edit.\n"
        "# What `nodeheal inject` needs, for the people allowed to break GPU nodes on purpose (test\n"
        "# clusters). Map them to the group, e.g. an EKS access entry with kubernetesGroups\n"
        f"# [{FAULT_INJECTOR.name(prefix)}]. The remediation functions never get these rights.\n"
        "#   kubectl apply -f deploy/rbac/fault-injector.yaml"
    )
    return header + "\n---\n" + "\n".join(_role_yaml(FAULT_INJECTOR, prefix)) + "\n"


def function_roles() -> tuple[FunctionRole, ...]:
    """Every remediation role, the optional node-delete and NodeClaim roles last."""
    return (
        *(FunctionRole(name, rules) for name, rules in KUBERNETES_RULES.items()),
        NODE_DELETE,
        NODECLAIM_DELETE,
    )


def groups_of(
    function: str, *, prefix: str, delete_node_after_terminate: bool, delete_nodeclaim: bool = False
) -> list[str]:
    """The Kubernetes groups the function's EKS access entry names."""
    groups = [FunctionRole(function, KUBERNETES_RULES[function]).name(prefix)]
    if delete_node_after_terminate and function == NODE_DELETE.function:
        groups.append(NODE_DELETE.name(prefix))
    if delete_nodeclaim and function == NODECLAIM_DELETE.function:
        groups.append(NODECLAIM_DELETE.name(prefix))
    return groups


# -- the exporter (deploy/exporter) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExporterRole:
    """A (Cluster)Role of the exporter's service account, as deploy/exporter declares it."""

    name: str
    rules: tuple[PolicyRule, ...]
    #: Namespace of a Role (bound by a RoleBinding); empty for a ClusterRole.
    namespace: str = ""
    #: Empty for the kustomize base; the optional component's path otherwise.
    component: str = ""


EXPORTER_NAMESPACE = "nodeheal"
EXPORTER_SERVICE_ACCOUNT = "nodeheal-exporter"
EXPORTER_LEASE = "nodeheal-exporter"

EXPORTER_ROLES: tuple[ExporterRole, ...] = (
    ExporterRole(
        "nodeheal-exporter",
        (PolicyRule(("",), ("nodes",), ("list", "watch"), "List, then watch, every Node."),),
    ),
    ExporterRole(
        "nodeheal-exporter-leader-election",
        (
            PolicyRule(
                ("coordination.k8s.io",),
                ("leases",),
                ("create",),
                "The first replica creates the Lease (create cannot be limited by name).",
            ),
            PolicyRule(
                ("coordination.k8s.io",),
                ("leases",),
                ("get", "update"),
                "Acquire, renew and release the Lease.",
                resource_names=(EXPORTER_LEASE,),
            ),
        ),
        namespace=EXPORTER_NAMESPACE,
    ),
    ExporterRole(
        "nodeheal-exporter-node-events",
        (PolicyRule(("",), ("events",), ("list", "watch"), "List, then watch, Events about Nodes."),),
    ),
)


# -- deploy/rbac/remediator.yaml --------------------------------------------------------------------

_HEADER = """\
# RBAC of the NodeHeal remediation Lambdas: one ClusterRole and one group per function.
#
# Generated from nodeheal/rbac.py (the single source of the rules, also enforced by the local
# simulation's API server): edit the table there, then `make rbac` (or
# `python -m nodeheal.rbac --group-prefix <prefix> > deploy/rbac/remediator.yaml`).
#
# The Lambdas authenticate as their IAM roles; the stack's EKS access entries (type STANDARD) put
# each function's role in the group `{prefix}-<function>` (cdk.json: nodeheal.kubernetesGroupPrefix
# = "{prefix}"; keep the two in sync). No secrets, no workloads, no cluster-admin access policy.
# `{node_delete}` (nodes delete) is granted to the terminate function only when
# deleteNodeAfterTerminate is true: the stack adds that group to its access entry then, and the
# binding has no members otherwise. `{nodeclaims}` (karpenter.sh nodeclaims list/delete) likewise,
# only when replace.method is "delete-nodeclaim".
#
# Apply once per cluster, before the first remediation:  kubectl apply -f deploy/rbac/remediator.yaml
# Upgrading from the single `nodeheal-remediator` group:
#   kubectl delete clusterrolebinding,clusterrole nodeheal-remediator
"""


def _flow(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {text}"]


def _role_yaml(role: FunctionRole, prefix: str) -> list[str]:
    name = role.name(prefix)
    labels = [
        "  labels:",
        "    app.kubernetes.io/name: nodeheal",
        f"    app.kubernetes.io/component: {role.function}",
    ]
    lines = []
    if role.only_when:
        lines.append(f"# Optional: effective only when {role.only_when}.")
    lines += ["apiVersion: rbac.authorization.k8s.io/v1", "kind: ClusterRole", "metadata:"]
    lines += [f"  name: {name}", *labels, "rules:"]
    for rule in role.rules:
        lines += _comment(rule.why, "  ")
        lines.append(f"  - apiGroups: {_flow(rule.api_groups)}")
        lines.append(f"    resources: {_flow(rule.resources)}")
        if rule.resource_names:
            lines.append(f"    resourceNames: {_flow(rule.resource_names)}")
        lines.append(f"    verbs: {_flow(rule.verbs)}")
    lines += [
        "---",
        "apiVersion: rbac.authorization.k8s.io/v1",
        "kind: ClusterRoleBinding",
        "metadata:",
        f"  name: {name}",
        *labels,
        "roleRef:",
        f"  apiGroup: {RBAC_API_GROUP}",
        "  kind: ClusterRole",
        f"  name: {name}",
        "subjects:",
        f"  - apiGroup: {RBAC_API_GROUP}",
        "    kind: Group",
        f"    name: {name}",
    ]
    return lines


def render_manifest(prefix: str = DEFAULT_GROUP_PREFIX) -> str:
    """``deploy/rbac/remediator.yaml`` for the group prefix ``prefix``."""
    header = _HEADER.format(
        prefix=prefix, node_delete=NODE_DELETE.name(prefix), nodeclaims=NODECLAIM_DELETE.name(prefix)
    )
    parts = [header.rstrip("\n")]
    for role in function_roles():
        parts.append("\n".join(_role_yaml(role, prefix)))
    return "\n---\n".join(parts) + "\n"


def markdown_table(prefix: str = DEFAULT_GROUP_PREFIX) -> str:
    """The README's RBAC table: one row per ClusterRole, exactly what it grants."""
    rows = ["| function | ClusterRole and group | may |", "|---|---|---|"]
    for role in function_roles():
        rules = "; ".join(rule.describe() for rule in role.rules)
        when = f" (only when {role.only_when})" if role.only_when else ""
        rows.append(f"| {role.function} | `{role.name(prefix)}`{when} | {rules} |")
    for exporter in EXPORTER_ROLES:
        scope = f"Role in `{exporter.namespace}`" if exporter.namespace else "ClusterRole"
        optional = f" (optional component `{exporter.component}`)" if exporter.component else ""
        rules = "; ".join(rule.describe() for rule in exporter.rules)
        rows.append(f"| exporter | {scope} `{exporter.name}`{optional} | {rules} |")
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print deploy/rbac/remediator.yaml for a group prefix.")
    parser.add_argument("--group-prefix", default=DEFAULT_GROUP_PREFIX)
    parser.add_argument(
        "--fault-injector", action="store_true", help="print deploy/rbac/fault-injector.yaml instead"
    )
    args = parser.parse_args(argv)
    render = render_fault_injector_manifest if args.fault_injector else render_manifest
    sys.stdout.write(render(args.group_prefix))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
