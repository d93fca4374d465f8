"""Runtime settings of the remediation workflow: policy, budgets, drain, reboot, mode.

One typed object, :class:`RemediationSettings`, parsed strictly from the ``nodeheal`` object in
``cdk.json`` (camelCase keys, the same shape that appears under ``settings`` in every execution's
input, so the console shows which policy made each decision). Deploy-only settings (bus name, rule
pattern, e-mails, VPC) live in ``nodeheal/deploy_config.py``; the Lambdas never read ``cdk.json``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nodeheal.actions import Action, Mode
from nodeheal.conditions import CONDITION_STATUSES
from nodeheal.counted_signals import DEFINITIONS as COUNTED_SIGNALS
from nodeheal.counted_signals import CountedRule
from nodeheal.settings_reader import SettingsReader, all_problems, problem, salvage

#: The mode of a configuration without ``mode``: decide and record, change nothing. Remediating
#: (``cordon-only``, ``full``) happens only when a configuration asks for it.
DEFAULT_MODE = Mode.DRY_RUN
#: The ``action`` values a setting may name.
ACTION_NAMES = tuple(action.value for action in Action)


def _action(value: Any, where: str) -> Action:
    """``value`` as an action; one that is not is reported, and ``alert`` stands in for it."""
    return salvage(lambda: Action.parse(str(value), where), Action.ALERT)


@dataclass(frozen=True, slots=True)
class ConditionRule:
    """What to do for a bad condition that carries no more specific signal (no Xid, no known reason)."""

    action: Action
    #: Seconds the condition must have been bad (since its lastTransitionTime) before acting, so a
    #: transient blip (an nvidia-smi timeout under load) does not cost a node.
    confirm_seconds: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action.value, "confirmSeconds": self.confirm_seconds}

    @classmethod
    def parse(cls, raw: Any, where: str) -> ConditionRule:
        if isinstance(raw, str):
            return cls(action=_action(raw, where))
        reader = SettingsReader(raw, where)
        rule = cls(
            action=Action(reader.choice("action", ACTION_NAMES)),
            confirm_seconds=reader.integer("confirmSeconds", 0, minimum=0, maximum=86_400),
        )
        reader.finish()
        return rule


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


#: Bad transitions in scope by default: every GPU, kernel and readiness signal the detectors set,
#: in the direction that means "unhealthy". Recoveries never start a workflow.
DEFAULT_SCOPE_CONDITIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPUProblem", ("True",)),
    ("GPUUnavailable", ("True",)),
    ("GPUDriverZombie", ("True",)),
    ("GPUThermalThrottling", ("True",)),
    ("GatewayUnreachable", ("True",)),
    ("DNSUnavailable", ("True",)),
    ("ContainerRuntimeUnresponsive", ("True",)),
    ("XfsShutdown", ("True",)),
    ("CperHardwareErrorFatal", ("True",)),
    ("CPUStuck", ("True",)),
    ("MemoryUncorrectable", ("True",)),
    ("DiskUnresponsive", ("True",)),
    ("FilesystemCorrupted", ("True",)),
    ("AcceleratedHardwareReady", ("False",)),
    ("KernelReady", ("False",)),
    ("ContainerRuntimeReady", ("False",)),
    ("NetworkingReady", ("False",)),
    ("StorageReady", ("False",)),
    ("KernelDeadlock", ("True",)),
    ("ReadonlyFilesystem", ("True",)),
    ("Ready", ("False", "Unknown")),
)


@dataclass(frozen=True, slots=True)
class ScopeCondition:
    type: str
    statuses: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "statuses": list(self.statuses)}

    @classmethod
    def parse(cls, raw: Any, where: str) -> ScopeCondition:
        reader = SettingsReader(raw, where)
        condition = cls(type=reader.string("type"), statuses=reader.string_list("statuses", non_empty=True))
        reader.finish()
        bad = [s for s in condition.statuses if s not in CONDITION_STATUSES]
        if bad:
            problem(f"{where}.statuses has {bad}; allowed: True, False, Unknown")
        return condition


@dataclass(frozen=True, slots=True)
class ScopeSettings:
    """Which nodes and transitions NodeHeal acts on: the ``rule`` object of ``cdk.json``.

    The stack builds the EventBridge rule from it, and the same object travels in every
    execution's settings (as ``scope``), so admit checks the LIVE node against exactly what the
    rule matched on the event's own claims (see :func:`nodeheal.workflow.scope.out_of_scope`).
    """

    conditions: tuple[ScopeCondition, ...] = tuple(ScopeCondition(t, s) for t, s in DEFAULT_SCOPE_CONDITIONS)
    #: Node label filters: label -> accepted values (e.g. ``{"karpenter.sh/nodepool": ["gpu"]}``).
    node_labels: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _frozen({}))

    def to_json(self) -> dict[str, Any]:
        return {
            "conditions": [condition.to_json() for condition in self.conditions],
            "nodeLabels": {key: list(values) for key, values in sorted(self.node_labels.items())},
        }

    @classmethod
    def read(cls, reader: SettingsReader) -> ScopeSettings:
        default_conditions = [{"type": t, "statuses": list(s)} for t, s in DEFAULT_SCOPE_CONDITIONS]
        conditions = reader.each("conditions", ScopeCondition.parse, default_conditions)
        if not conditions:
            problem(f"{reader.where('conditions')} must list at least one condition")
        labels_reader = reader.child("nodeLabels")
        labels = {key: labels_reader.string_list(key, non_empty=True) for key in labels_reader.key_names()}
        labels_reader.finish()
        settings = cls(conditions=conditions, node_labels=_frozen(labels))
        reader.finish()
        return settings


@dataclass(frozen=True, slots=True)
class PolicyOverrides:
    """Overrides of the built-in decision table; also the shape of a per-node-pool override."""

    #: Xid code -> action, over the catalog default (e.g. ``{"63": "replace"}`` to follow EC2's stance).
    xid_actions: Mapping[int, Action] = field(default_factory=lambda: _frozen({}))
    #: Condition reason (node monitoring agent style, e.g. ``NvidiaNVLinkError``) -> action.
    reason_actions: Mapping[str, Action] = field(default_factory=lambda: _frozen({}))
    #: Condition type -> rule when nothing more specific matched. ``*Ready`` stands for every
    #: node-monitoring-agent readiness condition other than the kubelet's ``Ready``.
    condition_rules: Mapping[str, ConditionRule] = field(default_factory=lambda: _frozen({}))

    def to_json(self) -> dict[str, Any]:
        return {
            "xidActions": {str(k): v.value for k, v in sorted(self.xid_actions.items())},
            "reasonActions": {k: v.value for k, v in sorted(self.reason_actions.items())},
            "conditionRules": {k: v.to_json() for k, v in sorted(self.condition_rules.items())},
        }

    @classmethod
    def read(cls, reader: SettingsReader) -> PolicyOverrides:
        xid_raw = reader.mapping("xidActions", {})
        xid_actions: dict[int, Action] = {}
        for key, value in xid_raw.items():
            if not str(key).isdigit():
                problem(f"{reader.where('xidActions')} key {key!r} is not an Xid number")
                continue
            xid_actions[int(key)] = _action(value, f"{reader.where('xidActions')}.{key}")
        reason_actions = {
            str(key): _action(value, f"{reader.where('reasonActions')}.{key}")
            for key, value in reader.mapping("reasonActions", {}).items()
        }
        condition_rules = {
            str(key): ConditionRule.parse(value, f"{reader.where('conditionRules')}.{key}")
            for key, value in reader.mapping("conditionRules", {}).items()
        }
        return cls(
            xid_actions=_frozen(xid_actions),
            reason_actions=_frozen(reason_actions),
            condition_rules=_frozen(condition_rules),
        )


@dataclass(frozen=True, slots=True)
class PolicySettings:
    overrides: PolicyOverrides = field(default_factory=PolicyOverrides)
    #: Action for a bad condition NodeHeal does not understand. Never destroy on what we do not know.
    unknown_action: Action = Action.ALERT
    #: A node rebooted for a GPU fault that faults again within this many hours is replaced.
    reboot_escalation_hours: int = 24
    #: Remediations of one node within ``attempt_window_hours`` before NodeHeal only alerts
    #: ("contact support"): a node that keeps failing after reboots needs a person or an RMA.
    max_attempts_per_node: int = 3
    attempt_window_hours: int = 24
    #: Nodes carrying this label with value ``true`` are never touched (alert only).
    opt_out_label: str = "nodeheal.io/disabled"
    #: Label naming a node's pool; per-pool overrides and pool budgets key on it.
    node_pool_label: str = "karpenter.sh/nodepool"
    #: Per-pool overrides, merged over ``overrides`` (pool wins).
    node_pools: Mapping[str, PolicyOverrides] = field(default_factory=lambda: _frozen({}))
    #: Counted signals whose rule differs from the default (``nodeheal.policy.counted_signals``):
    #: signal -> count within windowHours -> action.
    counted_signals: Mapping[str, CountedRule] = field(default_factory=lambda: _frozen({}))

    def counted_rule(self, signal: str) -> CountedRule:
        """The rule of a counted signal: the configured one, else the default."""
        configured = self.counted_signals.get(signal)
        return configured if configured is not None else COUNTED_SIGNALS[signal].default

    def to_json(self) -> dict[str, Any]:
        return {
            **self.overrides.to_json(),
            "countedSignals": {key: rule.to_json() for key, rule in sorted(self.counted_signals.items())},
            "unknownAction": self.unknown_action.value,
            "rebootEscalationHours": self.reboot_escalation_hours,
            "maxAttemptsPerNode": self.max_attempts_per_node,
            "attemptWindowHours": self.attempt_window_hours,
            "optOutLabel": self.opt_out_label,
            "nodePoolLabel": self.node_pool_label,
            "nodePools": {name: pool.to_json() for name, pool in sorted(self.node_pools.items())},
        }

    @classmethod
    def read(cls, reader: SettingsReader) -> PolicySettings:
        overrides = PolicyOverrides.read(reader)
        pools: dict[str, PolicyOverrides] = {}
        pools_reader = reader.child("nodePools")
        for name in pools_reader.key_names():
            pool_reader = pools_reader.child(name, optional=False)
            pools[name] = PolicyOverrides.read(pool_reader)
            pool_reader.finish()
        pools_reader.finish()
        settings = cls(
            overrides=overrides,
            unknown_action=Action(reader.choice("unknownAction", ACTION_NAMES, Action.ALERT.value)),
            reboot_escalation_hours=reader.integer("rebootEscalationHours", 24, minimum=0, maximum=720),
            max_attempts_per_node=reader.integer("maxAttemptsPerNode", 3, minimum=1, maximum=100),
            attempt_window_hours=reader.integer("attemptWindowHours", 24, minimum=1, maximum=720),
            opt_out_label=reader.string("optOutLabel", "nodeheal.io/disabled"),
            node_pool_label=reader.string("nodePoolLabel", "karpenter.sh/nodepool"),
            node_pools=_frozen(pools),
            counted_signals=_frozen(_counted_rules(reader.child("countedSignals"))),
        )
        reader.finish()
        return settings

    def for_pool(self, pool: str | None) -> PolicyOverrides:
        """The overrides that apply to a node of ``pool``: pool entries win over global ones."""
        pool_overrides = self.node_pools.get(pool or "")
        if pool_overrides is None:
            return self.overrides
        return PolicyOverrides(
            xid_actions=_frozen({**self.overrides.xid_actions, **pool_overrides.xid_actions}),
            reason_actions=_frozen({**self.overrides.reason_actions, **pool_overrides.reason_actions}),
            condition_rules=_frozen({**self.overrides.condition_rules, **pool_overrides.condition_rules}),
        )


def _counted_rules(reader: SettingsReader) -> dict[str, CountedRule]:
    """``policy.countedSignals``: per signal, ``count`` within ``windowHours`` -> ``action``. A key
    that names no counted signal is refused with the names there are."""
    rules: dict[str, CountedRule] = {}
    for key in reader.key_names():
        if key not in COUNTED_SIGNALS:
            known = ", ".join(sorted(COUNTED_SIGNALS))
            reader.refuse(key, f"{reader.where(key)} names no counted signal; they are {known}")
            continue
        default = COUNTED_SIGNALS[key].default
        rule_reader = reader.child(key, optional=False)
        rules[key] = CountedRule(
            count=rule_reader.integer("count", default.count, minimum=1, maximum=1000),
            window_hours=rule_reader.integer("windowHours", default.window_hours, minimum=1, maximum=720),
            action=Action(rule_reader.choice("action", ACTION_NAMES, default.action.value)),
        )
        rule_reader.finish()
    reader.finish()
    return rules


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    #: Remediations (reboot/replace) running at once per cluster. Each drains a multi-GPU node.
    max_in_flight: int = 2
    #: Remediations started per cluster in any sliding hour.
    max_per_hour: int = 6
    #: Share of a node pool that may be unhealthy-and-being-remediated at once (0..1)...
    max_unhealthy_pool_share: float = 0.2
    #: ...but never fewer than this many nodes, so a pool of 3 can still heal one node.
    min_pool_allowance: int = 1
    #: Budget refusals within ``breaker_window_minutes`` that open the circuit breaker. Once open,
    #: only a person resets it; events that arrive meanwhile are recorded and alerted, never replayed.
    breaker_trip_refusals: int = 3
    breaker_window_minutes: int = 30

    def to_json(self) -> dict[str, Any]:
        return {
            "maxInFlight": self.max_in_flight,
            "maxPerHour": self.max_per_hour,
            "maxUnhealthyPoolShare": self.max_unhealthy_pool_share,
            "minPoolAllowance": self.min_pool_allowance,
            "breakerTripRefusals": self.breaker_trip_refusals,
            "breakerWindowMinutes": self.breaker_window_minutes,
        }

    @classmethod
    def read(cls, reader: SettingsReader) -> BudgetSettings:
        settings = cls(
            max_in_flight=reader.integer("maxInFlight", 2, minimum=1, maximum=1000),
            max_per_hour=reader.integer("maxPerHour", 6, minimum=1, maximum=10_000),
            max_unhealthy_pool_share=reader.number("maxUnhealthyPoolShare", 0.2, minimum=0.0, maximum=1.0),
            min_pool_allowance=reader.integer("minPoolAllowance", 1, minimum=0, maximum=1000),
            breaker_trip_refusals=reader.integer("breakerTripRefusals", 3, minimum=1, maximum=10_000),
            breaker_window_minutes=reader.integer("breakerWindowMinutes", 30, minimum=1, maximum=1440),
        )
        reader.finish()
        return settings


#: What a drain does with a pod in a data-loss class (``emptyDir`` data, no controller):
#: ``evict`` it like any other, ``refuse`` to drain the node (kubectl drain's default: the node
#: stays cordoned for a person), or ``wait`` for it to finish on its own within the drain timeout.
POD_CLASS_POLICIES = ("evict", "refuse", "wait")
#: NVSentinel node-drainer's eviction modes: evict now (PDBs respected), let the pod finish on its
#: own, or evict and delete it once ``drain.deleteAfterSeconds`` have passed.
EVICTION_MODES = ("immediate", "allow-completion", "delete-after-timeout")
#: A namespace name, or a shell-style pattern over namespace names (``kube-*``, ``*-system``).
_NAMESPACE_PATTERN = re.compile(r"[a-z0-9\-*?\[\]!]+")


def _namespace_patterns(reader: SettingsReader, key: str, default: Any) -> tuple[str, ...]:
    patterns = reader.string_list(key, default)
    bad = [pattern for pattern in patterns if not _NAMESPACE_PATTERN.fullmatch(pattern)]
    if bad:
        problem(
            f"{reader.where(key)} has {bad}: each entry is a namespace name or a shell-style pattern "
            "over namespace names (lower-case letters, digits, '-', and the wildcards * ? [...])"
        )
        return tuple(default)
    return patterns


@dataclass(frozen=True, slots=True)
class EvictionModeRule:
    """How the pods a rule selects leave a draining node. A pod takes the mode of the first rule
    whose namespaces and pod labels both match it (an empty list or map matches every pod);
    pods no rule selects are evicted immediately."""

    mode: str
    namespaces: tuple[str, ...] = ()
    pod_labels: Mapping[str, str] = field(default_factory=lambda: _frozen({}))

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "namespaces": list(self.namespaces),
            "podLabels": dict(sorted(self.pod_labels.items())),
        }

    @classmethod
    def parse(cls, raw: Any, where: str) -> EvictionModeRule:
        reader = SettingsReader(raw, where)
        mode = reader.choice("mode", EVICTION_MODES)
        namespaces = _namespace_patterns(reader, "namespaces", [])
        labels = reader.mapping("podLabels", {})
        bad = [key for key, value in labels.items() if not isinstance(value, str) or not str(key).strip()]
        if bad:
            problem(f"{reader.where('podLabels')} maps label keys to string values; {bad} do not")
            labels = {key: value for key, value in labels.items() if key not in bad}
        reader.finish()
        return cls(mode=mode, namespaces=namespaces, pod_labels=_frozen(labels))


@dataclass(frozen=True, slots=True)
class DrainSettings:
    #: Seconds from the first eviction round until the drain gives up and applies ``on_timeout``.
    timeout_seconds: int = 900
    #: Seconds the state machine waits between eviction rounds (a 429 from a PDB is retried then).
    #: At least 1: a zero wait spins the loop through Lambda invocations and execution history.
    poll_seconds: int = 10
    #: ``force`` deletes what is left with ``force_grace_seconds``; ``abort`` stops, stays cordoned, alerts.
    on_timeout: str = "force"
    #: ``timeout_seconds`` 0 with ``on_timeout`` ``force`` deletes every pod at once, past every
    #: PodDisruptionBudget: refused unless this says it is meant (a typo'd 0 must not do that).
    allow_immediate_force: bool = False
    force_grace_seconds: int = 30
    #: How long pods annotated ``karpenter.sh/do-not-disrupt=true`` are left alone (for a checkpoint)
    #: before they are evicted like the others. The GPU is broken: they cannot make progress anyway.
    #: Shorter than ``timeout_seconds`` (or 0), else they would never be evicted, only forced.
    do_not_disrupt_wait_seconds: int = 300
    #: Evictions sent at once in one round.
    parallelism: int = 32
    #: What to do when the condition clears while the node is being drained or before its
    #: instance action: ``keep-cordoned`` (default) stops, leaves NodeHeal's cordon and tells a
    #: person; ``uncordon`` stops and removes what NodeHeal put on the node. Either way nothing is
    #: forced past a PodDisruptionBudget on a node that is no longer bad. The default keeps the
    #: cordon because a detector restart also clears conditions while the GPU stays broken.
    on_condition_cleared: str = "keep-cordoned"
    #: Pods with ``emptyDir`` volumes (see :data:`POD_CLASS_POLICIES`). ``evict`` by default: on a
    #: node whose GPU is dead the pod cannot make progress, and the node is rebooted or replaced
    #: next, so what the volume holds is lost whether NodeHeal evicts the pod or not.
    empty_dir: str = "evict"
    #: Pods no controller owns (a bare ``kubectl run`` pod, a debug pod). ``evict`` by default:
    #: nothing recreates them, but waiting cannot save them either: their GPU is gone, and the
    #: instance's reboot or termination ends them anyway. ``wait`` only delays the node by
    #: ``timeout_seconds``; ``refuse`` hands every such node to a person, as kubectl drain does.
    unmanaged_pods: str = "evict"
    #: Namespaces (names or shell-style patterns) whose pods are never evicted, deleted or waited
    #: for: system pods that serve the node itself and go with it (NVSentinel's system namespaces).
    never_drain_namespaces: tuple[str, ...] = ("kube-system",)
    #: Per-namespace / per-label eviction modes, first match wins (see :class:`EvictionModeRule`).
    eviction_modes: tuple[EvictionModeRule, ...] = ()
    #: ``delete-after-timeout`` pods are evicted for this long after the drain's first round, then
    #: deleted (past their PodDisruptionBudget, with ``force_grace_seconds``). Shorter than
    #: ``timeout_seconds`` whenever a rule uses that mode.
    delete_after_seconds: int = 600
    #: On a node that is not Ready (its kubelet dead with the GPU), a pod whose deletionTimestamp
    #: is this many seconds past never goes away: nothing is left to stop its containers. The drain
    #: stops waiting for it, as ``kubectl drain --skip-wait-for-delete-timeout`` does, instead of
    #: running the whole drain timeout. 0: wait for it like any other pod.
    skip_wait_for_delete_timeout_seconds: int = 60

    def to_json(self) -> dict[str, Any]:
        return {
            "timeoutSeconds": self.timeout_seconds,
            "pollSeconds": self.poll_seconds,
            "onTimeout": self.on_timeout,
            "allowImmediateForce": self.allow_immediate_force,
            "forceGraceSeconds": self.force_grace_seconds,
            "doNotDisruptWaitSeconds": self.do_not_disrupt_wait_seconds,
            "parallelism": self.parallelism,
            "onConditionCleared": self.on_condition_cleared,
            "emptyDir": self.empty_dir,
            "unmanagedPods": self.unmanaged_pods,
            "neverDrainNamespaces": list(self.never_drain_namespaces),
            "evictionModes": [rule.to_json() for rule in self.eviction_modes],
            "deleteAfterSeconds": self.delete_after_seconds,
            "skipWaitForDeleteTimeoutSeconds": self.skip_wait_for_delete_timeout_seconds,
        }

    @property
    def deletes_after_timeout(self) -> bool:
        return any(rule.mode == "delete-after-timeout" for rule in self.eviction_modes)

    @classmethod
    def read(cls, reader: SettingsReader) -> DrainSettings:
        settings = cls(
            timeout_seconds=reader.integer("timeoutSeconds", 900, minimum=0, maximum=86_400),
            poll_seconds=reader.integer("pollSeconds", 10, minimum=1, maximum=3600),
            on_timeout=reader.choice("onTimeout", ("force", "abort"), "force"),
            allow_immediate_force=reader.boolean("allowImmediateForce", False),
            force_grace_seconds=reader.integer("forceGraceSeconds", 30, minimum=0, maximum=3600),
            do_not_disrupt_wait_seconds=reader.integer(
                "doNotDisruptWaitSeconds", 300, minimum=0, maximum=86_400
            ),
            parallelism=reader.integer("parallelism", 32, minimum=1, maximum=256),
            on_condition_cleared=reader.choice(
                "onConditionCleared", ("keep-cordoned", "uncordon"), "keep-cordoned"
            ),
            empty_dir=reader.choice("emptyDir", POD_CLASS_POLICIES, "evict"),
            unmanaged_pods=reader.choice("unmanagedPods", POD_CLASS_POLICIES, "evict"),
            never_drain_namespaces=_namespace_patterns(reader, "neverDrainNamespaces", ["kube-system"]),
            eviction_modes=reader.each("evictionModes", EvictionModeRule.parse, []),
            delete_after_seconds=reader.integer("deleteAfterSeconds", 600, minimum=0, maximum=86_400),
            skip_wait_for_delete_timeout_seconds=reader.integer(
                "skipWaitForDeleteTimeoutSeconds", 60, minimum=0, maximum=86_400
            ),
        )
        reader.finish()
        if (
            settings.timeout_seconds == 0
            and settings.on_timeout == "force"
            and not settings.allow_immediate_force
        ):
            timeout, on_timeout = reader.where("timeoutSeconds"), reader.where("onTimeout")
            problem(
                f'{timeout} is 0 with {on_timeout} "force": every pod the first eviction round does not '
                "remove would be force-deleted at once, past its PodDisruptionBudget. Give the drain time, "
                f'set {on_timeout} to "abort", or set {reader.where("allowImmediateForce")} to true if '
                "that is meant"
            )
        return settings


@dataclass(frozen=True, slots=True)
class RebootSettings:
    #: Seconds between recovery checks after the EC2 reboot (at least 1, like the drain's poll).
    poll_seconds: int = 30
    #: Seconds after the reboot call within which the node must come back (new bootID, Ready,
    #: condition healthy); otherwise NodeHeal escalates to replace.
    recovery_timeout_seconds: int = 900

    def to_json(self) -> dict[str, Any]:
        return {"pollSeconds": self.poll_seconds, "recoveryTimeoutSeconds": self.recovery_timeout_seconds}

    @classmethod
    def read(cls, reader: SettingsReader) -> RebootSettings:
        settings = cls(
            poll_seconds=reader.integer("pollSeconds", 30, minimum=1, maximum=3600),
            recovery_timeout_seconds=reader.integer("recoveryTimeoutSeconds", 900, minimum=0, maximum=86_400),
        )
        reader.finish()
        return settings


#: ``replace.method`` values: how NodeHeal replaces an instance once the node is drained.
REPLACE_EC2_TERMINATE = "ec2-terminate"
REPLACE_DELETE_NODECLAIM = "delete-nodeclaim"
REPLACE_METHODS = (REPLACE_EC2_TERMINATE, REPLACE_DELETE_NODECLAIM)


#: ``replace.minBlockRemainingMinutes`` by default. A replacement in a Capacity Block is worth
#: its churn only if the job that lands on it gets real work done before the block reclaims it:
#: restarting a multi-node training job from its checkpoint (reload, re-shard, warm-up) takes tens
#: of minutes, so a node that lives for less than an hour mostly pays that cost again.
DEFAULT_MIN_BLOCK_REMAINING_MINUTES = 60
#: ``replace.launchMinutes`` by default: from the terminate call to a replacement that takes pods.
#: EC2 needs "several minutes" to clean up a terminated Capacity Block instance before its slot can
#: be launched into again (docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html);
#: then a p5/p6-class instance boots, joins the cluster and loads the GPU driver and device plugin,
#: typically 5 to 10 minutes more. 20 minutes covers both with a little room.
DEFAULT_LAUNCH_MINUTES = 20


@dataclass(frozen=True, slots=True)
class ReplaceSettings:
    #: ``ec2-terminate`` calls EC2 TerminateInstances (any node, managed node groups included);
    #: ``delete-nodeclaim`` deletes the Node's Karpenter NodeClaim, so Karpenter's termination
    #: finalizer terminates the instance and accounts for the capacity (Karpenter nodes only).
    method: str = REPLACE_EC2_TERMINATE
    #: A node in a Capacity Block is replaced only if its replacement would run at least this long
    #: before the block reclaims it (``nodeheal.workflow.capacity``); otherwise it stays cordoned
    #: and a person is told. 0 replaces whenever the replacement would come up at all.
    min_block_remaining_minutes: int = DEFAULT_MIN_BLOCK_REMAINING_MINUTES
    #: How long a replacement takes to come up after the terminate call (reservation slot cleanup,
    #: launch, boot, join, GPU ready): the Capacity Block rule counts it before the node is useful.
    launch_minutes: int = DEFAULT_LAUNCH_MINUTES
    #: Node pools (values of ``policy.nodePoolLabel``) where on-demand capacity is scarce: a
    #: replacement may not come back. There a reboot-class fault on an on-demand instance with no
    #: reservation keeps rebooting, within the attempt cap, instead of escalating to replace (D12).
    #: NodeHeal never guesses scarcity: only the pools named here count.
    #:
    #: A list here rather than a flag under ``policy.nodePools``: those entries are classification
    #: overrides, the same shape as the global ``policy`` object (a flag there would also become a
    #: global ``policy`` key), merged by ``PolicySettings.for_pool``; scarcity is a fact about
    #: getting a replacement, read with the rest of this block by the capacity rules.
    scarce_pools: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "minBlockRemainingMinutes": self.min_block_remaining_minutes,
            "launchMinutes": self.launch_minutes,
            "scarcePools": list(self.scarce_pools),
        }

    @classmethod
    def read(cls, reader: SettingsReader) -> ReplaceSettings:
        settings = cls(
            method=reader.choice("method", REPLACE_METHODS, REPLACE_EC2_TERMINATE),
            min_block_remaining_minutes=reader.integer(
                "minBlockRemainingMinutes", DEFAULT_MIN_BLOCK_REMAINING_MINUTES, minimum=0, maximum=10_080
            ),
            launch_minutes=reader.integer("launchMinutes", DEFAULT_LAUNCH_MINUTES, minimum=0, maximum=1440),
            scarce_pools=reader.string_list("scarcePools", []),
        )
        reader.finish()
        return settings

    @property
    def deletes_nodeclaim(self) -> bool:
        return self.method == REPLACE_DELETE_NODECLAIM

    def is_scarce(self, pool: str | None) -> bool:
        """Whether the settings name ``pool`` scarce; a node without a pool is never scarce."""
        return bool(pool) and pool in self.scarce_pools


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """Step Functions retries of transient failures (Kubernetes API 5xx/timeouts, EC2 throttling).

    Rendered into the state machine's Retry clauses (ASL cannot read them from the input), so they
    are deploy-time values; bounded so a dead API server fails the remediation in minutes, not hours:
    the backoff of one task's retries adds up to at most ``nodeheal.worst_case.MAX_RETRY_WAIT_SECONDS``.
    """

    interval_seconds: int = 2
    max_attempts: int = 4
    backoff_rate: float = 2.0

    def to_json(self) -> dict[str, Any]:
        return {
            "intervalSeconds": self.interval_seconds,
            "maxAttempts": self.max_attempts,
            "backoffRate": self.backoff_rate,
        }

    @classmethod
    def read(cls, reader: SettingsReader) -> RetrySettings:
        settings = cls(
            interval_seconds=reader.integer("intervalSeconds", 2, minimum=1, maximum=300),
            max_attempts=reader.integer("maxAttempts", 4, minimum=0, maximum=20),
            backoff_rate=reader.number("backoffRate", 2.0, minimum=1.0, maximum=10.0),
        )
        reader.finish()
        return settings


@dataclass(frozen=True, slots=True)
class RemediationSettings:
    """Everything the workflow needs to decide and act; serialised into each execution's input."""

    mode: Mode = DEFAULT_MODE
    policy: PolicySettings = field(default_factory=PolicySettings)
    budgets: BudgetSettings = field(default_factory=BudgetSettings)
    drain: DrainSettings = field(default_factory=DrainSettings)
    reboot: RebootSettings = field(default_factory=RebootSettings)
    replace: ReplaceSettings = field(default_factory=ReplaceSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    #: A per-node lock expires after this many seconds, so a crashed execution cannot wedge a node.
    #: It is never renewed, so it must exceed the worst case of one execution holding it by a
    #: margin (``nodeheal.worst_case``); 9 h covers the defaults' 7 h 47 min with room to tune. It is a
    #: backstop only: the finalizer releases the lock of every execution that ends (docs/architecture.md, D6).
    lock_ttl_seconds: int = 34_200
    #: Seconds between two looks at the lock of an execution that waits behind the node's lock
    #: holder; the holder's end is noticed at most this late.
    lock_wait_poll_seconds: int = 30
    #: Delete the Node object right after the EC2 terminate call instead of waiting for Karpenter
    #: to notice the instance is gone (it does within a minute or two; see the README).
    delete_node_after_terminate: bool = False
    #: The rule's scope, checked by admit against the live node. Not read by :meth:`read`: the
    #: deployment derives it from the ``rule`` keys (``nodeheal/deploy_config.py``) so rule and
    #: check cannot drift.
    scope: ScopeSettings = field(default_factory=ScopeSettings)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "policy": self.policy.to_json(),
            "budgets": self.budgets.to_json(),
            "drain": self.drain.to_json(),
            "reboot": self.reboot.to_json(),
            "replace": self.replace.to_json(),
            "retry": self.retry.to_json(),
            "lockTtlSeconds": self.lock_ttl_seconds,
            "lockWaitPollSeconds": self.lock_wait_poll_seconds,
            "deleteNodeAfterTerminate": self.delete_node_after_terminate,
            "scope": self.scope.to_json(),
        }

    @classmethod
    def from_json(cls, raw: Any, path: str = "settings") -> RemediationSettings:
        """Every problem of ``raw`` in one ConfigurationError. What the durations break together
        (D5) is :func:`nodeheal.worst_case.checked_settings`'s to check: the settings an execution carries
        were checked when they were deployed, and the run must finish under newer code."""
        with all_problems():
            reader = SettingsReader(raw, path)
            scope = ScopeSettings.read(reader.child("scope"))
            settings = dataclasses.replace(cls.read(reader), scope=scope)
            reader.finish()
        return settings

    @classmethod
    def read(cls, reader: SettingsReader) -> RemediationSettings:
        """Read the remediation keys from ``reader``; the caller calls ``finish`` (it may own more keys)
        and, for settings about to be deployed, :func:`nodeheal.worst_case.report_timing`."""
        mode_value = reader.choice("mode", tuple(m.value for m in Mode), DEFAULT_MODE.value)
        settings = cls(
            mode=Mode(mode_value),
            policy=PolicySettings.read(reader.child("policy")),
            budgets=BudgetSettings.read(reader.child("budgets")),
            drain=DrainSettings.read(reader.child("drain")),
            reboot=RebootSettings.read(reader.child("reboot")),
            replace=ReplaceSettings.read(reader.child("replace")),
            retry=RetrySettings.read(reader.child("retry")),
            lock_ttl_seconds=reader.integer("lockTtlSeconds", 34_200, minimum=60, maximum=7 * 86_400),
            lock_wait_poll_seconds=reader.integer("lockWaitPollSeconds", 30, minimum=1, maximum=3600),
            delete_node_after_terminate=reader.boolean("deleteNodeAfterTerminate", False),
        )
        if settings.delete_node_after_terminate and settings.replace.deletes_nodeclaim:
            problem(
                f"{reader.where('deleteNodeAfterTerminate')} is true with {reader.where('replace')}.method "
                f'"{REPLACE_DELETE_NODECLAIM}": Karpenter\'s termination removes the Node itself, after '
                "its own drain; deleting the Node first would cut that drain short. Leave it false"
            )
        return settings
