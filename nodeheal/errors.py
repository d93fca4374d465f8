"""Domain errors.

The class names are the Step Functions contract: a Lambda task that raises one of these fails with
the class name as its error name, and the state machine's Retry/Catch clauses refer to them by
``ErrorClass.__name__``. Renaming a class is therefore a breaking change to the workflow.
"""

from __future__ import annotations


class NodeHealError(Exception):
    """Base class of every error NodeHeal raises on purpose."""


class InvalidEventError(NodeHealError):
    """An event does not follow the event contract (missing or malformed field). Never retried."""


class ConfigurationError(NodeHealError):
    """Settings (cdk.json context, environment, flags) are missing or invalid. Never retried."""


class KubernetesApiUnavailableError(NodeHealError):
    """The Kubernetes API answered 5xx, 429 outside eviction, or did not answer. Retried with backoff."""


class DeadlineExceededError(NodeHealError):
    """The invocation's own deadline (its Lambda timeout minus a reserve) came before a call could
    finish, or left too little time to start one. Raised instead of letting Lambda kill the function,
    so the failure has a name, a message saying which call, and a retry. Retried with backoff."""


class KubernetesApiError(NodeHealError):
    """The Kubernetes API refused a request in a way a retry cannot fix (401, 403, 422...)."""


class RemediationStoppedError(NodeHealError):
    """A step found a reason to stop the remediation that is not a failure: the state machine
    catches each subclass by name and goes to ``Record outcome`` (not ``Record failure``)."""


class NodeGoneError(RemediationStoppedError):
    """The Node was deleted mid-remediation: nothing of it is left to act on."""


class NodeReplacedError(RemediationStoppedError):
    """The name now belongs to another Node object or instance (EC2 reuses private IPs), or the
    admitted node no longer carries NodeHeal's taint (a person took it back). Nothing is touched."""


class ConditionClearedError(RemediationStoppedError):
    """The condition is no longer bad on the live node: never drain further, force or act on it."""


class RemediationPausedError(RemediationStoppedError):
    """NodeHeal was paused, or its mode lowered, while this remediation ran: stop before mutating."""


class SupersededError(RemediationStoppedError):
    """Another execution took this node's lock (a more urgent fault, D2): leave the node to it."""


class ContendedError(SupersededError):
    """A more severe execution waits to take this node over (its contender mark is on the lock),
    but has not taken it yet. The step is retried (``nodeheal.worst_case.contended_retry_clause``):
    the contender preempts the lock, and the retry stops as superseded, or its mark lapses because
    it ended first, and the retry goes on with this fault instead of dropping it (D2). Once the
    retries run out it is a stop like ``SupersededError``: the contender is alive and renewing."""


class DrainAbortedError(NodeHealError):
    """The drain timed out and the drain policy is ``abort``: the node stays cordoned for a person."""


class OwnershipVerificationError(NodeHealError):
    """The EC2 instance is not the Node's, or lacks the cluster ownership tag. Never retried."""


class InstanceNotFoundError(NodeHealError):
    """The Node's providerID does not name an EC2 instance we can resolve."""


class Ec2ThrottledError(NodeHealError):
    """EC2 throttled the call (RequestLimitExceeded and friends). Retried with backoff."""


class Ec2IncorrectStateError(NodeHealError):
    """EC2 refused the call because of the instance state (IncorrectInstanceState). Retried, then recorded."""


class LedgerContentionError(NodeHealError):
    """A conditional write on a shared ledger item lost a race. Retried immediately with jitter."""


class LockNotHeldError(NodeHealError):
    """This execution tried to act on a node whose lock it does not hold (expired and taken over)."""


class DuplicateExecutionError(NodeHealError):
    """An execution with this name exists already: the event is a duplicate of one being handled."""


#: Errors the state machine catches into ``Record outcome``, in the order the Catch lists them.
STOP_ERRORS: tuple[type[RemediationStoppedError], ...] = (
    NodeGoneError,
    NodeReplacedError,
    ConditionClearedError,
    RemediationPausedError,
    SupersededError,
    ContendedError,
)
