"""What a NodeHeal function may touch, as pure data: Kubernetes RBAC rules and ledger grants.

The step registry (``nodeheal.steps``) declares each step's grants with these types; the RBAC
table (``nodeheal.rbac``) renders the rules to YAML and the CDK adapters turn the ledger grants
into IAM statements. Kept apart from both so that the registry, the table and the adapters can
all import them without importing one another.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One ``rules[]`` entry of a (Cluster)Role."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    #: Why the function needs it: the comment above the rule in the manifest.
    why: str
    resource_names: tuple[str, ...] = ()

    def to_manifest(self) -> dict[str, list[str]]:
        rule = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        return rule

    def permissions(self) -> Iterator[Permission]:
        """Every (verb, API group, resource, name) the rule grants, one at a time."""
        for group in self.api_groups:
            for resource in self.resources:
                for verb in self.verbs:
                    for name in self.resource_names or ("",):
                        yield Permission(verb, group, resource, name)

    def describe(self) -> str:
        """``nodes get/list``, ``events create (core, events.k8s.io)``: the README's wording."""
        text = f"{'/'.join(self.resources)} {'/'.join(self.verbs)}"
        groups = [group or "core" for group in self.api_groups]
        if groups != ["core"]:
            text += f" ({', '.join(groups)})"
        if self.resource_names:
            text += f" named {', '.join(self.resource_names)}"
        return text


@dataclass(frozen=True, slots=True, order=True)
class Permission:
    """One granted atom: ``verb`` on ``resource`` (``pods/eviction`` for a subresource) in ``api_group``."""

    verb: str
    api_group: str
    resource: str
    #: ``resourceNames`` restriction; empty when the rule names none.
    name: str = ""

    def __str__(self) -> str:
        group = f".{self.api_group}" if self.api_group else ""
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.resource}{group}{named}"


class LedgerItem(Enum):
    """The ledger's item kinds, by partition key (the key schema of ``nodeheal.aws.ledger``)."""

    #: Per-node lock, keyed by the node's instance: ``LOCK#<cluster>#<instance>``.
    LOCK = "LOCK#{cluster}#*"
    #: A cluster's admission state (budgets, breaker, pause), ``CLUSTER#<cluster>``.
    ADMISSION = "CLUSTER#{cluster}"
    #: Remediation records, per instance: ``INSTANCE#<cluster>#<instance>``.
    RECORDS = "INSTANCE#{cluster}#*"
    #: The end of an execution (recorded and notified once), ``EXECUTION#<cluster>#<name>``.
    END = "EXECUTION#{cluster}#*"
    #: The episode memory, per instance: ``EPISODE#<cluster>#<instance>`` (one item per condition).
    EPISODE = "EPISODE#{cluster}#*"
    #: Dropped-event records, ``DROPPED#<date>`` (not per cluster: a dropped event may name none).
    DROPPED = "DROPPED#*"
    #: Counted signals' windows, per instance: ``SIGNALS#<cluster>#<instance>`` (one item per
    #: signal, ``SIGNAL#<signal>``; docs/architecture.md, D22).
    SIGNALS = "SIGNALS#{cluster}#*"

    def leading_keys(self, clusters: Sequence[str]) -> list[str]:
        """``dynamodb:LeadingKeys`` patterns (StringLike) of these items in the configured clusters."""
        if "{cluster}" not in self.value:
            return [self.value]
        return [self.value.format(cluster=cluster) for cluster in clusters]


@dataclass(frozen=True, slots=True)
class LedgerGrant:
    """DynamoDB item actions on the ledger table, limited to items whose partition key is one of
    ``items`` (``dynamodb:LeadingKeys``). Only what the function's code calls: each use says which
    calls need it."""

    actions: tuple[str, ...]
    items: tuple[LedgerItem, ...]
