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

# ---- request bodies: decoding, unknown fields, warnings --------------------------------------

# The Warning header the apiserver's recorder writes, with the text quoted by makeQuotedString:
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/net/http.go (NewWarningHeader)
WARNING_HEADER = "299 - {quoted_text}"

# sigs.k8s.io/json strict errors, reported by fieldValidation=Warn as warnings:
# https://github.com/kubernetes-sigs/json/blob/main/internal/golang/encoding/json/kubernetes_patch.go
UNKNOWN_FIELD = 'unknown field "{path}"'
DUPLICATE_FIELD = 'duplicate field "{path}"'

# runtime.NewStrictDecodingError(...).Error():
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/runtime/error.go
STRICT_DECODING_ERROR = "strict decoding error: {errors}"

# A body the decoder rejects (400), transformDecodeError:
# https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/rest.go
DECODE_FAILED = '{kind} in version "{version}" cannot be handled as a {kind}: {error}'

# encoding/json's UnmarshalTypeError.Error() (Go's src/encoding/json/decode.go), the decoder the
# serializer wraps:
JSON_TYPE_ERROR = "json: cannot unmarshal {value} into Go struct field {struct}.{field} of type {type}"
JSON_TYPE_ERROR_NO_FIELD = "json: cannot unmarshal {value} into Go value of type {type}"

# time.ParseError.Error() (Go's src/time/format.go), what metav1.Time and metav1.MicroTime return
# from UnmarshalJSON: https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/apis/meta/v1/micro_time.go
TIME_CANNOT_PARSE = "parsing time {value} as {layout}: cannot parse {rest} as {element}"
TIME_OUT_OF_RANGE = "parsing time {value}: {what} out of range"
TIME_EXTRA_TEXT = "parsing time {value}: extra text: {extra}"
TIME_DAY_OUT_OF_RANGE = "parsing time {value}: day out of range"
# metav1.RFC3339Micro, the layout of a MicroTime (Lease spec.renewTime, spec.acquireTime):
RFC3339_MICRO_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"

# resource.Quantity parse errors:
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/resource/quantity.go
QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
QUANTITY_SUFFIX = "unable to parse quantity's suffix"

# A fatal decode error of a patched object is a 422 on the field "patch", jsonPatcher and
# applyPatchToObject: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/patch.go
PATCH_FIELD = "patch"

# ---- field errors (k8s.io/apimachinery/pkg/util/validation/field) ----------------------------

# errors.NewInvalid's message, with one cause or several distinct ones in brackets:
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/errors/errors.go (NewInvalid)
# and pkg/util/errors/errors.go (aggregate.Error)
INVALID = "{kind} {quoted_name} is invalid: {causes}"

# ErrorType.String(): https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/validation/field/errors.go
FIELD_VALUE_INVALID = "Invalid value"
FIELD_VALUE_REQUIRED = "Required value"
FIELD_VALUE_DUPLICATE = "Duplicate value"
FIELD_VALUE_NOT_SUPPORTED = "Unsupported value"
FIELD_VALUE_FORBIDDEN = "Forbidden"
FIELD_VALUE_TOO_LONG = "Too long"
TOO_LONG_DETAIL = "may not be more than {max} bytes"
NOT_SUPPORTED_DETAIL = "supported values: {values}"

# ---- object metadata -------------------------------------------------------------------------

# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/validation/objectmeta.go
FIELD_IMMUTABLE = "field is immutable"
NAME_REQUIRED = "name or generateName is required"
NAMESPACE_NOT_ALLOWED = "not allowed on this type"
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/validation/generic.go
IS_NEGATIVE = "must be greater than or equal to 0"

# The resourceVersion a conditional-only kind (a Lease) must carry on update, Store.Update:
# https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go
RESOURCE_VERSION_REQUIRED = "must be specified for an update"

# Names, label keys and values:
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/validation/validation.go
QUALIFIED_NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
QUALIFIED_NAME_WHOLE = (
    "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
    "prefix and '/' (e.g. 'example.com/MyName')"
)
NAME_PART_EMPTY = "name part must be non-empty"
NAME_PART_TOO_LONG = "name part must be no more than 63 characters"
PREFIX_PART_EMPTY = "prefix part must be non-empty"
PREFIX_PART = "prefix part {message}"
MAX_LENGTH = "must be no more than {max} characters"
DNS1123_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1123_LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_LABEL_DOTS = "must not contain dots"
LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)

# ---- taints ----------------------------------------------------------------------------------

# validateNodeTaints and validateTaintEffect:
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/validation.go
TAINT_DUPLICATE = "taints must be unique by key and effect pair"

# ---- request options -------------------------------------------------------------------------

# ValidateFieldValidation: https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/apis/meta/v1/validation/validation.go
FIELD_VALIDATION_VALUES = ("", "Ignore", "Strict", "Warn")

# ---- kind-specific validation ----------------------------------------------------------------

# path.ValidatePathSegmentName, the name check of the generic object-meta validation:
# https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/validation/path/name.go
PATH_SEGMENT_MAY_NOT_BE = "may not be '{value}'"
PATH_SEGMENT_MAY_NOT_CONTAIN = "may not contain '{value}'"
# ValidateObjectMetaAccessorUpdate: https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/validation/objectmeta.go
GENERATION_DECREMENTED = "must not be decremented"

# ValidateLeaseSpec: https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/coordination/validation/validation.go
LEASE_DURATION_POSITIVE = "must be greater than 0"
LEASE_PREFERRED_HOLDER = "may only be specified if `strategy` is defined"

# ValidatePodDisruptionBudgetSpec: https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/policy/validation/validation.go
PDB_BOTH_SET = "minAvailable and maxUnavailable cannot be both set"

# ValidatePodUpdate (the real message goes on with a diff of the two specs):
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/validation.go
POD_SPEC_IMMUTABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`, "
    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
    "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)

# The value Store.Update shows for a missing resourceVersion: the parsed uint64 0 printed with %#v
# (https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go).
UNSET_RESOURCE_VERSION = "0x0"

# A 409 Conflict, errors.NewConflict, and the optimistic-lock reason Store.Update gives it
# (OptimisticLockErrorMsg): https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/errors/errors.go
# and https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go
OBJECT_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

# -- lists: limit and continue ----------------------------------------------------------------------

#: ``inconsistentContinue`` in k8s.io/apiserver pkg/storage/etcd3/errors.go, the 410 for a continue
#: token whose resourceVersion etcd has compacted away (``handleCompactedErrorForPaging``):
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/etcd3/errors.go
CONTINUE_EXPIRED_INCONSISTENT = (
    "The provided continue parameter is too old "
    "to display a consistent list result. You can start a new list without "
    "the continue parameter, or use the continue token in this response to "
    "retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list."
)

#: ``ValidateListOptions`` in k8s.io/apiserver pkg/storage/interfaces.go wraps every continue
#: token decoding error in this 400:
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/interfaces.go
INVALID_CONTINUE_TOKEN = "invalid continue token: {}"

#: ``ErrGenericInvalidKey`` in k8s.io/apiserver pkg/storage/continue.go (wrapped as "%w: %v"):
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/continue.go
CONTINUE_KEY_NOT_VALID = "continue key is not valid"

#: ``ErrInvalidStartRV`` in pkg/storage/continue.go: a token whose resourceVersion is 0.
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/continue.go
CONTINUE_INVALID_START_RV = (
    "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
)

#: ``ErrEmptyStartKey`` in pkg/storage/continue.go: a token without a start key.
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/continue.go
CONTINUE_EMPTY_START_KEY = "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"

#: ``ErrUnrecognizedEncodedVersion`` in pkg/storage/continue.go, followed by the token's version.
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/continue.go
CONTINUE_UNRECOGNIZED_VERSION = "continue key is not valid: server does not recognize this encoded version"

#: ``ValidateListOptions`` in pkg/storage/interfaces.go: a continue token with a resourceVersion.
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/interfaces.go
CONTINUE_WITH_RESOURCE_VERSION = "specifying resource version is not allowed when using continue"

# -- watches: expired and future resourceVersions --------------------------------------------------

#: ``getAllEventsSinceLocked`` in k8s.io/apiserver pkg/storage/cacher/watch_cache.go: a watch from
#: a version older than the watch cache's window (``oldest`` is the window's oldest, less one):
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/cacher/watch_cache.go
WATCH_CACHE_TOO_OLD_RESOURCE_VERSION = "too old resource version: {requested} ({oldest})"

#: ``interpretWatchError`` in k8s.io/apiserver pkg/storage/etcd3/errors.go: a watch served by etcd
#: itself (a resource without a watch cache, such as core/v1 events) from a compacted revision:
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/etcd3/errors.go
ETCD_WATCH_TOO_OLD_RESOURCE_VERSION = "The resourceVersion for the provided watch is too old."

#: ``NewTooLargeResourceVersionError`` in k8s.io/apiserver pkg/storage/errors.go, through
#: ``NewTimeoutError`` in k8s.io/apimachinery pkg/api/errors/errors.go (which adds "Timeout: "):
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/errors.go
#: https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/errors/errors.go
TOO_LARGE_RESOURCE_VERSION = "Timeout: Too large resource version: {requested}, current: {current}"

#: ``tooLargeResourceVersionCauseMsg`` in pkg/storage/errors.go, the cause beside it.
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/errors.go
TOO_LARGE_RESOURCE_VERSION_CAUSE = "Too large resource version"

# -- request rejections -----------------------------------------------------------------------------

#: ``tooManyRequests`` in k8s.io/apiserver pkg/server/filters/priority-and-fairness.go: API Priority
#: and Fairness rejecting a request answers this as text/plain (``http.Error``), with Retry-After:
#: https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/server/filters/priority-and-fairness.go
APF_TOO_MANY_REQUESTS = "Too many requests, please try again later."

#: ``NewInternalError`` in k8s.io/apimachinery pkg/api/errors/errors.go: how an etcd failure in a
#: watch reaches the client (``transformErrorToEvent`` in pkg/storage/etcd3/watcher.go):
#: https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/errors/errors.go
INTERNAL_ERROR = "Internal error occurred: {}"

# -- Events: core/v1 and events.k8s.io/v1 ---------------------------------------------------------

# legacyValidateEvent, ValidateEventCreate, ValidateEventUpdate and validateV1EventSeries: every
# Event passes the legacy checks; one written through events.k8s.io/v1 also the strict ones.
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/events.go
EVENT_NAMESPACE_MISMATCH = "does not match event.namespace"
EVENT_FIELD_MUST_BE_UNSET = "needs to be unset"
EVENT_TYPE_INVALID = "has invalid value: {type}"
EVENT_SERIES_COUNT_TOO_LOW = "should be at least 2"
EVENT_FIELD_TOO_LONG = "can have at most {max} characters"

# The create and update handlers refuse a body whose apiVersion is another served version of the
# kind (a core/v1 Event sent to events.k8s.io/v1): it decodes, then fails AcceptsGroupVersion.
# https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/create.go
# https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/update.go
API_VERSION_MISMATCH = (
    "the API version in the data ({data}) does not match the expected API version ({expected})"
)

# A field selector naming a field the version's field-label conversion does not know: the
# conversion funcs' error, which the list handler returns as a 400 BadRequest.
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/v1/conversion.go
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/events/v1/conversion.go
# https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/get.go (ListResource)
FIELD_LABEL_NOT_SUPPORTED = "field label not supported: {label}"

# ---- authorization -----------------------------------------------------------------------------

# authorizingVisitor.visit: the reason RBAC gives when a rule allows, naming the binding as the
# describers of the rule resolver do (describeSubject: ServiceAccount "name/namespace", else
# Kind "name").
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/plugin/pkg/auth/authorizer/rbac/rbac.go
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/rbac/validation/rule.go
RBAC_ALLOWED_BY = "RBAC: allowed by {source}"
CLUSTER_ROLE_BINDING_SOURCE = 'ClusterRoleBinding "{binding}" of ClusterRole "{role}" to {subject}'
ROLE_BINDING_SOURCE = 'RoleBinding "{binding}/{namespace}" of Role "{role}" to {subject}'
BINDING_SUBJECT = '{kind} "{name}"'

# ValidateSubjectAccessReviewSpec and ValidateSelfSubjectAccessReviewSpec.
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/authorization/validation/validation.go
REVIEW_BOTH_ATTRIBUTES = "cannot be specified in combination with resourceAttributes"
REVIEW_ONE_OF_ATTRIBUTES = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
REVIEW_NO_SUBJECT = "at least one of user or group must be specified"
