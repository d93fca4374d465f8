"""``nodeheal doctor``: a read-only acceptance check of one cluster's NodeHeal deployment.

Each check answers one question a person asks after ``cdk deploy`` and the manifests, and says
``ok`` or ``failed`` with the fix:

``stack``
    The CloudFormation stack is deployed (not rolled back, not mid-update) and has every output
    NodeHeal's tools read (:mod:`nodeheal.stack_outputs`), this cluster's exporter role included.
``workflow``
    The state machine is ACTIVE; its ``Load settings`` state holds the deployed policy, and the admit
    function's ``NODEHEAL_MODE`` the live mode (D4).
``cluster``
    The EKS cluster is ACTIVE and reads access entries (authentication mode ``API`` or
    ``API_AND_CONFIG_MAP``).
``kubernetes``
    The cluster's API answers doctor's own credentials, and they may ask it about others' access.
``access:<function>``
    The function's IAM role has its access entry, and RBAC allows that identity every request the
    function makes (:data:`nodeheal.rbac.KUBERNETES_RULES`).
``heartbeat``
    The exporter's heartbeats reach ingest: the metric the stack's heartbeat alarm watches has a
    datapoint within the alarm's window (``heartbeatMissingMinutes``).
``rule``, ``heartbeat-rule``
    The deployed rules, read from EventBridge, match a sample event of this cluster, as EventBridge
    itself decides (``TestEventPattern``).
``node`` (with ``--node``)
    What Admit would do about that node now, with the deployed policy and the live mode, computed
    locally (:mod:`nodeheal.workflow.preview`, D18 in docs/architecture.md).

Doctor starts no execution and writes nothing, anywhere: every AWS call is a Describe, List, Get or
TestEventPattern; every Kubernetes request is a GET or an access review (a ``create`` that stores
nothing). A check that cannot run because an earlier one failed says so and fails too: nothing is
reported ok that was not verified.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodeheal import stack_outputs
from nodeheal.actions import Mode
from nodeheal.aws.deployment import AlarmView, DeployedRule, StackView
from nodeheal.aws.eks_access import ACCESS_ENTRY_MODES, AccessEntry, ClusterAccess
from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings
from nodeheal.errors import NodeHealError
from nodeheal.events import (
    DEFAULT_SOURCE,
    DETAIL_TYPE_CONDITION_CHANGED,
    DETAIL_TYPE_EXPORTER_HEARTBEAT,
    EXPORTER_HEARTBEATS_METRIC,
    ExporterHeartbeat,
    NodeConditionEvent,
    NodeIdentity,
    PreviousState,
)
from nodeheal.grants import Permission
from nodeheal.kube.access_review import AccessAnswer
from nodeheal.kube_views import LiveNode
from nodeheal.patterns import match
from nodeheal.rbac import KUBERNETES_RULES, NODE_DELETE, NODECLAIM_DELETE
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.admission import PoolNodes
from nodeheal.workflow.preview import LedgerReader, NodePreview, preview

#: Every authenticated request carries this group besides the access entry's: the API server's
#: authenticator adds it, while a SubjectAccessReview checks exactly the groups it names.
AUTHENTICATED_GROUP = "system:authenticated"
#: Stack states in which the deployed template is the one last asked for.
STABLE_STATUSES = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE")
#: Doctor looks this far back for a heartbeat, to say when the last one was (not only that none
#: arrived within the alarm's window).
HEARTBEAT_LOOKBACK = timedelta(hours=3)
#: A sample fault for the rule check: the line NPD's GPU monitor sets for Xid 79.
SAMPLE_XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
PLACEHOLDER_ACCOUNT = "123456789012"
REVIEW_ACCESS = Permission("create", "authorization.k8s.io", "subjectaccessreviews")
READ_NODE = Permission("get", "", "nodes")
LIST_NODES = Permission("list", "", "nodes")
RBAC_FIX = "kubectl apply -f deploy/rbac/remediator.yaml"


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    ok: bool
    summary: str
    #: What to run or change; empty when ok.
    fix: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "ok": self.ok,
            "summary": self.summary,
            "fix": self.fix,
            "details": dict(self.details),
        }


# -- what doctor reads, as ports --------------------------------------------------------------------


class DeploymentReader(Protocol):
    def stack(self, name: str) -> StackView | None: ...
    def state_machine(self, arn: str) -> tuple[str, RemediationSettings]: ...
    def function_mode(self, function_name: str) -> Mode | None: ...
    def rules(self, bus: str) -> list[DeployedRule]: ...
    def matches(self, pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool: ...
    def alarms_notifying(self, topic_arn: str) -> list[AlarmView]: ...
    def last_datapoint(self, alarm: AlarmView, since: datetime, until: datetime) -> datetime | None: ...


class EksReader(Protocol):
    def cluster(self, name: str) -> ClusterAccess | None: ...
    def access_entry(self, cluster: str, principal_arn: str) -> AccessEntry | None: ...


class AccessReviewer(Protocol):
    def may_i(self, permission: Permission, namespace: str = "") -> AccessAnswer: ...
    def may(
        self, user: str, groups: Sequence[str], permission: Permission, namespace: str = ""
    ) -> AccessAnswer: ...


class NodeReader(PoolNodes, Protocol):
    def get(self, name: str) -> LiveNode | None: ...


@dataclass(frozen=True, slots=True)
class KubeSide:
    """The cluster as doctor reaches it, with the person's credentials."""

    reviews: AccessReviewer
    nodes: NodeReader


@dataclass
class Inputs:
    stack: str
    cluster: str
    region: str
    deployment: DeploymentReader
    eks: EksReader
    #: Connects to the cluster on first use (a kubeconfig or EKS); may raise.
    kube: Callable[[], KubeSide]
    #: The ledger, from its table name (read only by the node check).
    ledger: Callable[[str], LedgerReader]
    now: datetime
    node: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    stack: str
    cluster: str
    region: str
    checks: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "cluster": self.cluster,
            "region": self.region,
            "ok": self.ok,
            "checks": [check.to_json() for check in self.checks],
        }


class _CheckFailedError(Exception):
    """A check's failure, carried out of the code that found it."""

    def __init__(self, summary: str, fix: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(summary)
        self.summary = summary
        self.fix = fix
        self.details = details or {}


def _not_checked(check: str, needs: str) -> CheckResult:
    return CheckResult(check, False, f"not checked: it needs {needs}", fix=f"fix {needs} first")


def _call_failed(exc: Exception) -> tuple[str, str]:
    """(summary, fix) for an AWS or Kubernetes call that failed."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        operation = str(getattr(exc, "operation_name", "") or "the call")
        text = f"{operation}: {code}: {error.get('Message', '')}"
        if "AccessDenied" in code or code == "UnauthorizedOperation":
            return text, (
                f"your AWS credentials may not call {operation}: doctor needs the read-only actions "
                "listed in docs/operations.md (Checking a deployment)"
            )
        return text, "see the AWS error above; run nodeheal doctor again once it is resolved"
    return str(exc), "see the error above; run nodeheal doctor again once it is resolved"


@contextmanager
def _calls(check: str, results: list[CheckResult]) -> Iterator[None]:
    """Run one check's calls: a failure to call becomes the check's failed line, never a traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except _CheckFailedError as failed:
        results.append(CheckResult(check, False, failed.summary, failed.fix, failed.details))
    except (NodeHealError, ClientError, BotoCoreError, ValueError) as exc:
        summary, fix = _call_failed(exc)
        results.append(CheckResult(check, False, summary, fix))


# -- the checks ------------------------------------------------------------------------------------


def examine(inputs: Inputs) -> Report:
    """Run every check, in order; later checks read what earlier ones found."""
    results: list[CheckResult] = []
    found = _Found()
    checks: tuple[Callable[[Inputs, _Found, list[CheckResult]], None], ...] = (
        _check_stack,
        _check_workflow,
        _check_cluster,
        _check_kubernetes,
        _check_access,
        _check_heartbeat,
        _check_rules,
        _check_node,
    )
    for check in checks:
        check(inputs, found, results)
    return Report(inputs.stack, inputs.cluster, inputs.region, tuple(results))


@dataclass
class _Found:
    """What the checks found so far, for the ones after them."""

    outputs: Mapping[str, str] = field(default_factory=dict)
    settings: RemediationSettings | None = None
    mode: Mode | None = None
    cluster_ok: bool = False
    kube: KubeSide | None = None
    may_review: bool = False


def _check_stack(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    with _calls("stack", results):
        view = inputs.deployment.stack(inputs.stack)
        if view is None:
            raise _CheckFailedError(
                f"stack {inputs.stack} does not exist in {inputs.region}",
                f"deploy it (npx cdk deploy {inputs.stack}, docs/deploy.md), or pass the right "
                "--stack/--region",
            )
        problems, fix = [], ""
        if view.status not in STABLE_STATUSES:
            problems.append(
                f"status {view.status}" + (f" ({view.status_reason})" if view.status_reason else "")
            )
            fix = _stack_status_fix(view)
        required = stack_outputs.required_outputs([inputs.cluster], KUBERNETES_RULES)
        missing = [name for name in required if name not in view.outputs]
        if missing:
            problems.append(f"missing output(s) {', '.join(missing)}")
            if stack_outputs.exporter_role_output(inputs.cluster) in missing:
                fix = fix or (
                    f"{inputs.cluster} is not one of the stack's clusters: add it to `clusters` in cdk.json "
                    f"and deploy (npx cdk deploy {inputs.stack})"
                )
            fix = (
                fix
                or f"deploy this release of NodeHeal (npx cdk deploy {inputs.stack}): its outputs are older"
            )
        found.outputs = view.outputs
        if problems:
            raise _CheckFailedError(
                f"stack {view.name}: {'; '.join(problems)}", fix, {"status": view.status, "missing": missing}
            )
        results.append(
            CheckResult(
                "stack",
                True,
                f"{view.name} is {view.status} with every output NodeHeal reads ({len(required)})",
                details={"status": view.status, "outputs": dict(view.outputs)},
            )
        )


def _stack_status_fix(view: StackView) -> str:
    if view.status.endswith("_IN_PROGRESS"):
        return "wait for the stack operation to finish, then run nodeheal doctor again"
    if view.status == "UPDATE_ROLLBACK_COMPLETE":
        return (
            f"the last update was rolled back and the previous version runs: read why with "
            f"`aws cloudformation describe-stack-events --stack-name {view.name}`, fix it and deploy again"
        )
    return (
        f"the stack is not usable: read why with `aws cloudformation describe-stack-events --stack-name "
        f"{view.name}`; a ROLLBACK_COMPLETE stack must be deleted before it is deployed again"
    )


def _output(found: _Found, name: str) -> str | None:
    return found.outputs.get(name) or None


def _check_workflow(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    arn = _output(found, stack_outputs.STATE_MACHINE_ARN)
    if arn is None:
        results.append(_not_checked("workflow", f"the stack's {stack_outputs.STATE_MACHINE_ARN} output"))
        return
    with _calls("workflow", results):
        status, settings = inputs.deployment.state_machine(arn)
        admit = f"{inputs.stack}-admit"
        environment_mode = inputs.deployment.function_mode(admit)
        found.settings = settings
        found.mode = environment_mode or settings.mode
        source = f"NODEHEAL_MODE of {admit}" if environment_mode else "the deployed settings"
        note = ""
        if environment_mode and environment_mode is not settings.mode:
            note = f"; the settings say {settings.mode.value}, the function's environment decides (D4)"
        summary = (
            f"state machine {arn.rsplit(':', 1)[-1]} is {status}; mode {found.mode.value} ({source}{note})"
        )
        details = {
            "stateMachine": arn,
            "status": status,
            "mode": found.mode.value,
            "settingsMode": settings.mode.value,
        }
        if status != "ACTIVE":
            raise _CheckFailedError(
                summary, f"deploy the stack again (npx cdk deploy {inputs.stack})", details
            )
        results.append(CheckResult("workflow", True, summary, details=details))


def _check_cluster(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    with _calls("cluster", results):
        view = inputs.eks.cluster(inputs.cluster)
        if view is None:
            raise _CheckFailedError(
                f"EKS cluster {inputs.cluster} does not exist in {inputs.region}",
                "pass the cluster's name and region (aws eks list-clusters --region <region>)",
            )
        details = {"status": view.status, "authenticationMode": view.authentication_mode}
        if view.status != "ACTIVE":
            raise _CheckFailedError(
                f"EKS cluster {inputs.cluster} is {view.status}", "wait until it is ACTIVE", details
            )
        if view.authentication_mode not in ACCESS_ENTRY_MODES:
            raise _CheckFailedError(
                f"EKS cluster {inputs.cluster} has authentication mode "
                f"{view.authentication_mode or 'CONFIG_MAP'}: "
                "it ignores the access entries that let NodeHeal's functions in",
                f"aws eks update-cluster-config --name {inputs.cluster} --access-config "
                "authenticationMode=API_AND_CONFIG_MAP",
                details,
            )
        found.cluster_ok = True
        results.append(
            CheckResult(
                "cluster",
                True,
                f"EKS cluster {inputs.cluster} is ACTIVE and reads access entries "
                f"({view.authentication_mode})",
                details=details,
            )
        )


def _check_kubernetes(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    """Doctor's own access, asked of the API server with a SelfSubjectAccessReview (which any
    authenticated user may create): reviewing the functions' access needs ``create
    subjectaccessreviews``, and ``--node`` needs to read nodes."""
    wanted = [REVIEW_ACCESS, *((READ_NODE, LIST_NODES) if inputs.node else ())]
    with _calls("kubernetes", results):
        try:
            kube = inputs.kube()
            answers = {permission: kube.reviews.may_i(permission) for permission in wanted}
        except NodeHealError as exc:
            raise _CheckFailedError(
                f"cannot ask the API server of {inputs.cluster}: {exc}",
                "pass --kubeconfig/--context for this cluster, or --eks to reach it through EKS with your "
                "AWS "
                "credentials (an access entry must let them in)",
            ) from None
        found.kube = kube
        missing = [str(p) for p, answer in answers.items() if not answer.allowed]
        found.may_review = answers[REVIEW_ACCESS].allowed
        details = {str(p): {"allowed": a.allowed, "reason": a.reason} for p, a in answers.items()}
        if missing:
            raise _CheckFailedError(
                f"your Kubernetes credentials may not {', '.join(missing)} (SelfSubjectAccessReview)",
                "run doctor as a cluster administrator (for example through an access entry with "
                "AmazonEKSClusterAdminPolicy), or bind your user to a ClusterRole granting "
                + ", ".join(missing),
                details,
            )
        results.append(
            CheckResult(
                "kubernetes",
                True,
                f"the API server of {inputs.cluster} answers, and your credentials may "
                + ", ".join(str(p) for p in wanted),
                details=details,
            )
        )


def needed_permissions(function: str, settings: RemediationSettings | None) -> list[Permission]:
    """Every request ``function`` makes, from the RBAC table (node and NodeClaim deletion only when
    configured)."""
    rules = list(KUBERNETES_RULES[function])
    if function == NODE_DELETE.function and settings is not None and settings.delete_node_after_terminate:
        rules.extend(NODE_DELETE.rules)
    if function == NODECLAIM_DELETE.function and settings is not None and settings.replace.deletes_nodeclaim:
        rules.extend(NODECLAIM_DELETE.rules)
    return list(dict.fromkeys(permission for rule in rules for permission in rule.permissions()))


def _check_access(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    """Each function's access entry, and RBAC's answer for that identity, request by request.

    The question is about another identity than doctor's, so it is a SubjectAccessReview naming the
    user and groups EKS gives the function, not a SelfSubjectAccessReview: that one answers only for
    its caller, and would need doctor to impersonate the function (``Impersonate-User`` and
    ``Impersonate-Group`` headers), a far broader right (``impersonate`` on users and groups: acting
    as anyone) than ``create subjectaccessreviews`` (asking about anyone). A review names the subject
    in full and nothing is added to it, so the groups are the access entry's plus
    ``system:authenticated``, which the authenticator adds to every real request; the user is the
    entry's username with the function's name standing for the role session (``{{SessionName}}``).
    NodeHeal's RBAC binds groups only, so the answer does not depend on that session name; only a
    binding a cluster adds for one user name would. The review goes through the cluster's whole
    authorizer chain, so an EKS access policy on the entry counts too, as it would for the function.
    """
    for function in KUBERNETES_RULES:
        check = f"access:{function}"
        role_output = stack_outputs.remediator_role_output(function)
        role_arn = _output(found, role_output)
        if role_arn is None:
            results.append(_not_checked(check, f"the stack's {role_output} output"))
            continue
        if not found.cluster_ok:
            results.append(_not_checked(check, "the cluster check"))
            continue
        with _calls(check, results):
            entry = inputs.eks.access_entry(inputs.cluster, role_arn)
            role_name = role_arn.rsplit("/", 1)[-1]
            if entry is None:
                raise _CheckFailedError(
                    f"no EKS access entry for {role_name} in {inputs.cluster}: the {function} function "
                    "cannot "
                    "reach the cluster",
                    f"deploy the stack with {inputs.cluster} in `clusters` (npx cdk deploy "
                    f"{inputs.stack}); it "
                    "creates one entry per function and cluster, and a deploy restores one deleted by hand",
                    {"role": role_arn},
                )
            if entry.type != "STANDARD":
                raise _CheckFailedError(
                    f"the access entry of {role_name} is of type {entry.type}, not STANDARD",
                    f"delete the entry (aws eks delete-access-entry --cluster-name {inputs.cluster} "
                    f"--principal-arn {role_arn}) and deploy the stack again",
                )
            if found.kube is None or not found.may_review:
                results.append(_not_checked(check, "the kubernetes check (access reviews)"))
                continue
            user = entry.username_for_session(f"{inputs.stack}-{function}")
            groups = (*entry.kubernetes_groups, AUTHENTICATED_GROUP)
            answers = {
                p: found.kube.reviews.may(user, groups, p)
                for p in needed_permissions(function, found.settings)
            }
            details = {
                "role": role_arn,
                "user": user,
                "groups": list(groups),
                "requests": {str(p): {"allowed": a.allowed, "reason": a.reason} for p, a in answers.items()},
            }
            refused = [str(p) for p, answer in answers.items() if not answer.allowed]
            if refused:
                raise _CheckFailedError(
                    f"RBAC refuses {function} ({', '.join(entry.kubernetes_groups)}): {', '.join(refused)}",
                    _rbac_fix(function, entry.kubernetes_groups),
                    details,
                )
            results.append(
                CheckResult(
                    check,
                    True,
                    f"{role_name} enters as {', '.join(entry.kubernetes_groups)}; RBAC allows all "
                    f"{len(answers)} requests: {', '.join(str(p) for p in answers)}",
                    details=details,
                )
            )


def _rbac_fix(function: str, groups: Sequence[str]) -> str:
    prefixes = [g.removesuffix(f"-{function}") for g in groups if g.endswith(f"-{function}")]
    prefix = prefixes[0] if prefixes else ""
    if prefix and prefix != "nodeheal":
        return (
            "render the RBAC for your group prefix and apply it: "
            f"NODEHEAL_GROUP_PREFIX={prefix} make rbac && {RBAC_FIX}"
        )
    return RBAC_FIX


def _check_heartbeat(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    topic = _output(found, stack_outputs.NOTIFICATIONS_TOPIC_ARN)
    if topic is None:
        results.append(
            _not_checked("heartbeat", f"the stack's {stack_outputs.NOTIFICATIONS_TOPIC_ARN} output")
        )
        return
    with _calls("heartbeat", results):
        alarms = [
            alarm
            for alarm in inputs.deployment.alarms_notifying(topic)
            if alarm.metric == EXPORTER_HEARTBEATS_METRIC
            and alarm.dimensions.get("cluster") == inputs.cluster
        ]
        if not alarms:
            raise _CheckFailedError(
                f"the stack has no heartbeat alarm for {inputs.cluster}: it does not serve this cluster",
                f"add {inputs.cluster} to `clusters` in cdk.json and deploy (npx cdk deploy {inputs.stack})",
            )
        alarm = alarms[0]
        window = timedelta(minutes=alarm.window_minutes)
        last = inputs.deployment.last_datapoint(
            alarm, inputs.now - max(window, HEARTBEAT_LOOKBACK), inputs.now
        )
        details = {
            "alarm": alarm.name,
            "alarmState": alarm.state,
            "windowMinutes": alarm.window_minutes,
            "lastHeartbeat": format_timestamp(last) if last else None,
        }
        # A datapoint is stamped with the start of its period: a beat that arrived within the
        # window may carry a stamp up to one period older.
        if last is not None and last > inputs.now - window - timedelta(seconds=alarm.period_seconds):
            results.append(
                CheckResult(
                    "heartbeat",
                    True,
                    f"the exporter of {inputs.cluster} was heard {_ago(inputs.now - last)} ago (alarm after "
                    f"{alarm.window_minutes} min of silence; alarm {alarm.state or 'unknown'})",
                    details=details,
                )
            )
            return
        heard = (
            f"last heard {_ago(inputs.now - last)} ago"
            if last
            else f"none in the last {_ago(HEARTBEAT_LOOKBACK)}"
        )
        raise _CheckFailedError(
            f"no exporter heartbeat from {inputs.cluster} within {alarm.window_minutes} min ({heard}; alarm "
            f"{alarm.state or 'unknown'})",
            "the exporter is not reaching the bus: `kubectl -n nodeheal get pods`, the leader's logs and "
            "`publish_failures_total` on its :8080/metrics; its Pod Identity association must use the role "
            f"in the stack output {stack_outputs.exporter_role_output(inputs.cluster)} and its ConfigMap "
            "must "
            f"say NODEHEAL_CLUSTER_NAME={inputs.cluster} (docs/operations.md, runbook No exporter heartbeat)",
            details,
        )


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _check_rules(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    bus = _output(found, stack_outputs.EVENT_BUS_NAME)
    if bus is None or found.settings is None:
        needs = f"the stack's {stack_outputs.EVENT_BUS_NAME} output" if bus is None else "the workflow check"
        results.extend(_not_checked(check, needs) for check in ("rule", "heartbeat-rule"))
        return
    rules: list[DeployedRule] = []
    reported = len(results)
    with _calls("rule", results):
        rules = inputs.deployment.rules(bus)
    if len(results) > reported:  # the rules could not be listed
        results.append(_not_checked("heartbeat-rule", "the rule check"))
        return
    settings = found.settings
    for check, detail_type in (
        ("rule", DETAIL_TYPE_CONDITION_CHANGED),
        ("heartbeat-rule", DETAIL_TYPE_EXPORTER_HEARTBEAT),
    ):
        with _calls(check, results):
            rule = next((r for r in rules if detail_type in (r.pattern.get("detail-type") or ())), None)
            if rule is None:
                raise _CheckFailedError(
                    f"no rule on bus {bus} takes {detail_type!r} events",
                    f"deploy the stack again (npx cdk deploy {inputs.stack})",
                )
            source = _source_for(rule.pattern, inputs.cluster)
            if check == "rule":
                event = sample_fault_event(inputs.cluster, settings, source, inputs.region, inputs.now)
                condition = event["detail"]["condition"]
                what = f"a sample {condition['type']}={condition['status']} event"
            else:
                event = sample_heartbeat_event(inputs.cluster, source, inputs.region, inputs.now)
                what = "a sample heartbeat"
            details = {"rule": rule.name, "state": rule.state, "targets": rule.targets, "event": event}
            if rule.state != "ENABLED":
                raise _CheckFailedError(
                    f"rule {rule.name} is {rule.state}",
                    f"aws events enable-rule --name {rule.name} --event-bus-name {bus}",
                    details,
                )
            if rule.targets == 0:
                raise _CheckFailedError(
                    f"rule {rule.name} has no target: matched events reach nothing",
                    f"deploy the stack again (npx cdk deploy {inputs.stack})",
                    details,
                )
            if not inputs.deployment.matches(rule.pattern, event):
                why = "; ".join(match(rule.pattern, event).reasons) or "EventBridge said no"
                raise _CheckFailedError(
                    f"rule {rule.name} does not match {what} of {inputs.cluster} from {source} ({why})",
                    f"events of {inputs.cluster} do not reach ingest: add it to `clusters` (and check `rule` "
                    f"in cdk.json) and deploy (npx cdk deploy {inputs.stack}); the exporter's --source must "
                    "be the stack's eventBus.source",
                    details,
                )
            results.append(
                CheckResult(
                    check,
                    True,
                    f"rule {rule.name} matches {what} of {inputs.cluster} from {source} (EventBridge "
                    "TestEventPattern)",
                    details=details,
                )
            )


def _source_for(pattern: Mapping[str, Any], cluster: str) -> str:
    """The Source this cluster's exporter sends (``<prefix>.<cluster>``), as the rule names it."""
    sources = pattern.get("source") or []
    for entry in sources:
        if isinstance(entry, Mapping) and isinstance(entry.get("prefix"), str):
            return f"{entry['prefix']}{cluster}"
    exact = [s for s in sources if isinstance(s, str)]
    return exact[0] if exact else f"{DEFAULT_SOURCE}.{cluster}"


def _envelope(
    detail_type: str, source: str, region: str, now: datetime, detail: Mapping[str, Any]
) -> dict[str, Any]:
    """An EventBridge event as the bus hands it to rules (TestEventPattern needs every field)."""
    return {
        "version": "0",
        "id": "00000000-0000-0000-0000-00000000d0c7",
        "detail-type": detail_type,
        "source": source,
        "account": PLACEHOLDER_ACCOUNT,
        "time": format_timestamp(now),
        "region": region,
        "resources": [],
        "detail": dict(detail),
    }


def sample_fault_event(
    cluster: str, settings: RemediationSettings, source: str, region: str, now: datetime
) -> dict[str, Any]:
    """A contract 1.1 event of a bad condition the deployed scope covers, on a node its labels accept:
    what this cluster's exporter would send for a real fault (GPUProblem Xid 79 when in scope)."""
    conditions = settings.scope.conditions
    chosen = next((c for c in conditions if c.type == "GPUProblem"), conditions[0])
    status = chosen.statuses[0]
    message = SAMPLE_XID_79 if chosen.type == "GPUProblem" else f"{chosen.type} is {status}"
    labels = {key: values[0] for key, values in sorted(settings.scope.node_labels.items())}
    event = NodeConditionEvent(
        cluster=cluster,
        node=NodeIdentity(
            name="nodeheal-doctor-sample",
            uid="00000000-0000-0000-0000-00000000d0c7",
            provider_id="aws:///us-west-2a/i-0000000000000d0c7",
            instance_id="i-0000000000000d0c7",
            labels=labels,
        ),
        condition=Condition(chosen.type, status, "NodeHealDoctorSample", message, now),
        observed_at=now,
        previous=PreviousState("False" if status != "False" else "True", "Healthy"),
    )
    return _envelope(DETAIL_TYPE_CONDITION_CHANGED, source, region, now, event.to_detail())


def sample_heartbeat_event(cluster: str, source: str, region: str, now: datetime) -> dict[str, Any]:
    beat = ExporterHeartbeat(cluster=cluster, identity="nodeheal-doctor", sent_at=now, interval_seconds=60)
    return _envelope(DETAIL_TYPE_EXPORTER_HEARTBEAT, source, region, now, beat.to_detail())


def _check_node(inputs: Inputs, found: _Found, results: list[CheckResult]) -> None:
    if inputs.node is None:
        return
    table = _output(found, stack_outputs.LEDGER_TABLE_NAME)
    if table is None or found.settings is None or found.mode is None or found.kube is None:
        needs = "the stack, workflow and kubernetes checks"
        results.append(_not_checked("node", needs))
        return
    with _calls("node", results):
        node = found.kube.nodes.get(inputs.node)
        if node is None:
            raise _CheckFailedError(
                f"node {inputs.node} does not exist in {inputs.cluster}",
                "check the name with `kubectl get nodes`",
            )
        seen = preview(
            inputs.cluster,
            node,
            found.settings,
            mode=found.mode,
            ledger=inputs.ledger(table),
            nodes=found.kube.nodes,
            now=inputs.now,
        )
        results.append(CheckResult("node", True, describe_preview(seen), details=preview_json(seen)))


def describe_preview(seen: NodePreview) -> str:
    node = seen.node
    instance = node.instance_id or "no EC2 instance in providerID: never rebooted or terminated"
    head = f"{node.name} ({instance}; mode {seen.mode.value}): "
    parts = [
        f"{p.condition.type}={p.condition.status} ({p.condition.reason}) -> {p.decision.action.value}"
        + (
            f" (planned {p.decision.planned_action.value})"
            if p.decision.planned_action is not p.decision.action
            else ""
        )
        + f"; Admit {p.outcome}"
        for p in seen.conditions
    ]
    parts += [f"{c.type}={c.status} is outside the rule ({why})" for c, why in seen.out_of_scope]
    if not parts:
        return head + "no bad condition: NodeHeal would do nothing"
    return head + " | ".join(parts)


def preview_json(seen: NodePreview) -> dict[str, Any]:
    return {
        "node": seen.node.name,
        "uid": seen.node.uid,
        "instance": seen.node.instance_id,
        "mode": seen.mode.value,
        "conditions": [
            {
                "condition": p.condition.to_api(),
                "decision": p.decision.to_json(),
                "confirmRemainingSeconds": p.confirm_remaining,
                "acts": p.acts,
                "refused": p.refused,
                "admit": p.outcome,
            }
            for p in seen.conditions
        ],
        "outOfScope": [{"condition": c.to_api(), "why": why} for c, why in seen.out_of_scope],
    }
