"""Every server string a test asserts on, each beside the real source that produces it.

The fake builds its answers from these constants and the tests import them, so no test spells a
server message itself and a wording fixed here is fixed everywhere. Placeholders in ``{}`` are
filled with ``str.format``.
"""

from __future__ import annotations

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
CONTINUE_INVALID_START_RV = (
    "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
)

#: ``ErrEmptyStartKey`` in pkg/storage/continue.go: a token without a start key.
CONTINUE_EMPTY_START_KEY = "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"

#: ``ErrUnrecognizedEncodedVersion`` in pkg/storage/continue.go, followed by the token's version.
CONTINUE_UNRECOGNIZED_VERSION = "continue key is not valid: server does not recognize this encoded version"

#: ``ValidateListOptions`` in pkg/storage/interfaces.go: a continue token with a resourceVersion.
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
