"""The fake API server's own words: every message, reason and condition text a test asserts on.

Each constant is the real kube-apiserver's text, with a link to the code that produces it; the
fake builds its answers from these, and tests import them instead of spelling a server string out,
so a wording fixed here is fixed everywhere at once. Placeholders are ``str.format`` fields.
"""

from __future__ import annotations

# errors.NewConflict: "Operation cannot be fulfilled on %s %q: %v" with the qualified resource.
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/errors/errors.go#L232-L244
CONFLICT = 'Operation cannot be fulfilled on {resource} "{name}": {why}'

# rest.BeforeDelete checks DeleteOptions.preconditions early, against the object it just read, and
# reports a mismatch as a Conflict on the object's Kind (not its resource): "Pod", "Node".
# https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/rest/delete.go#L83-L91
# The eviction subresource's getLatestPod repeats both checks with the same words (on "Pod").
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/pod/storage/eviction.go
PRECONDITION_UID_MISMATCH = (
    "the UID in the precondition ({precondition}) does not match the UID in record ({record}). "
    "The object might have been deleted and then recreated"
)
PRECONDITION_RESOURCE_VERSION_MISMATCH = (
    "the ResourceVersion in the precondition ({precondition}) does not match the ResourceVersion in "
    "record ({record}). The object might have been modified"
)

# pods/eviction (pkg/registry/core/pod/storage/eviction.go, v1.33): Create, checkAndDecrement,
# createTooManyRequestsError and addConditionAndDeletePod.
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/pod/storage/eviction.go
EVICTION_NAME_MISMATCH = "name in URL does not match name in Eviction object"
EVICTION_MULTIPLE_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
EVICTION_BUDGET_VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
#: The cause of a 429 when the budget allows no disruption (retry-after 0: none is suggested).
EVICTION_BUDGET_NEEDS = (
    "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
)
#: The cause of a 429 with retry-after 10 s: the disruption controller has not observed the PDB's
#: latest generation, or the pod changed after the budget was checked.
EVICTION_BUDGET_PROCESSING = "The disruption budget {name} is still being processed by the server."
#: policyv1.DisruptionBudgetCause, the `reason` of both causes above.
# https://github.com/kubernetes/api/blob/v0.33.1/policy/v1/types.go
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
#: createTooManyRequestsError's suggestion, sent as details.retryAfterSeconds and Retry-After.
EVICTION_RETRY_AFTER_SECONDS = 10
#: The pod condition the eviction writes before it deletes the pod (core/v1 DisruptionTarget).
DISRUPTION_TARGET = "DisruptionTarget"
DISRUPTION_TARGET_REASON = "EvictionByEvictionAPI"
DISRUPTION_TARGET_MESSAGE = "Eviction API: evicting"
