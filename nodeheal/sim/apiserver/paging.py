"""Lists with ``limit`` and ``continue``: consistent snapshots, continue tokens and their expiry.

How kube-apiserver 1.33 pages a list (k8s.io/apiserver v0.33.1):

* ``storage.ValidateListOptions`` (pkg/storage/interfaces.go) decodes the continue token first: a
  token that does not decode is 400 "invalid continue token: ...", and a token together with a
  ``resourceVersion`` (other than "0") is 400.
* The first page is read at the latest revision (from the watch cache, a consistent read), later
  pages from etcd at the revision the token carries (``delegator.ShouldDelegateList``: without the
  alpha ListFromCacheSnapshot gate the cache cannot serve a continuation). Every page of one list
  therefore shows the objects as they were when the first page was read.
* When etcd has compacted that revision, ``handleCompactedErrorForPaging``
  (pkg/storage/etcd3/errors.go) answers 410 Expired and puts a fresh token in the Status's
  ``metadata.continue``: the same start key at resourceVersion -1, "the latest", which continues
  the list inconsistently if the client chooses to.
* Tokens are ``storage.EncodeContinue`` (pkg/storage/continue.go): base64url without padding of
  ``{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<key after the prefix>\\u0000"}``.
"""

from __future__ import annotations

import base64
import json
import string
from typing import Any

from nodeheal.sim.apiserver.messages import (
    CONTINUE_EMPTY_START_KEY,
    CONTINUE_EXPIRED_INCONSISTENT,
    CONTINUE_INVALID_START_RV,
    CONTINUE_KEY_NOT_VALID,
    CONTINUE_UNRECOGNIZED_VERSION,
    CONTINUE_WITH_RESOURCE_VERSION,
    INVALID_CONTINUE_TOKEN,
)
from nodeheal.sim.apiserver.objectstore import CompactedError, ObjectStore
from nodeheal.sim.apiserver.resources import ResourceType
from nodeheal.sim.apiserver.selectors import FieldSelector, LabelSelector
from nodeheal.sim.apiserver.status import ApiError, bad_request, expired

JSON = dict[str, Any]

TOKEN_VERSION = "meta.k8s.io/v1"
#: The resourceVersion a token carries to mean "continue at the latest revision".
LATEST = -1

_BASE64URL = frozenset(string.ascii_letters + string.digits + "-_")


def _go_json(value: JSON) -> str:
    # encoding/json escapes HTML-significant characters; the start key is otherwise plain text.
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def encode_continue(key: str, prefix: str, resource_version: int) -> str:
    """``storage.EncodeContinue``: the key relative to the list's prefix, and the revision."""
    token = {"v": TOKEN_VERSION, "rv": resource_version, "start": key.removeprefix(prefix)}
    return base64.urlsafe_b64encode(_go_json(token).encode()).rstrip(b"=").decode()


def _raw_url_b64decode(text: str) -> bytes:
    """base64.RawURLEncoding.DecodeString, with Go's ``CorruptInputError`` positions."""
    for index, char in enumerate(text):
        if char not in _BASE64URL:
            raise ValueError(f"illegal base64 data at input byte {index}")
    if len(text) % 4 == 1:
        # A lone character cannot end a quantum; Go reports where that quantum starts.
        raise ValueError(f"illegal base64 data at input byte {len(text) - 1}")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _go_path_clean(path: str) -> str:
    """``path.Clean`` for a rooted path: no empty, "." or ".." elements, no trailing slash."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def decode_continue(token: str, prefix: str) -> tuple[str, int]:
    """``storage.DecodeContinue``: the full key to start from, and the revision to read at.

    Raises the 400 ``ValidateListOptions`` answers. Past the generic "continue key is not valid",
    the detail of a token that is not base64 follows Go's decoder; for one that is not JSON it
    is Python's wording (the status, reason and prefix are the real server's)."""
    try:
        data = json.loads(_raw_url_b64decode(token))
    except ValueError as exc:
        raise bad_request(INVALID_CONTINUE_TOKEN.format(f"{CONTINUE_KEY_NOT_VALID}: {exc}")) from exc
    if not isinstance(data, dict):
        raise bad_request(INVALID_CONTINUE_TOKEN.format(f"{CONTINUE_KEY_NOT_VALID}: {data!r}"))
    version = data.get("v", "")
    if version != TOKEN_VERSION:
        raise bad_request(INVALID_CONTINUE_TOKEN.format(f"{CONTINUE_UNRECOGNIZED_VERSION} {version}"))
    rv = data.get("rv", 0)
    start = data.get("start", "")
    if not isinstance(rv, int) or not isinstance(start, str):
        raise bad_request(INVALID_CONTINUE_TOKEN.format(CONTINUE_KEY_NOT_VALID))
    if rv == 0:
        raise bad_request(INVALID_CONTINUE_TOKEN.format(CONTINUE_INVALID_START_RV))
    if not start:
        raise bad_request(INVALID_CONTINUE_TOKEN.format(CONTINUE_EMPTY_START_KEY))
    # A start key may not climb out of the list's prefix ("../other-namespace/...").
    rooted = start if start.startswith("/") else "/" + start
    if _go_path_clean(rooted) != rooted:
        raise bad_request(INVALID_CONTINUE_TOKEN.format(f"{CONTINUE_KEY_NOT_VALID}: {start}"))
    return prefix + rooted[1:], rv


def list_body(
    store: ObjectStore,
    rtype: ResourceType,
    namespace: str | None,
    labels: LabelSelector,
    fields: FieldSelector,
    *,
    limit: int,
    continue_token: str,
    resource_version: str,
) -> JSON:
    """The ``*List`` answer to a GET of a collection, paged as the real server pages it."""
    prefix = f"{namespace}/" if rtype.namespaced and namespace is not None else ""
    start_key, revision = "", None
    if continue_token:
        start_key, token_rv = decode_continue(continue_token, prefix)
        if resource_version not in ("", "0"):
            raise bad_request(CONTINUE_WITH_RESOURCE_VERSION)
        revision = token_rv if token_rv > 0 else None
    try:
        page = store.list_page(
            rtype,
            namespace,
            None if labels.empty else labels,
            None if fields.empty else fields,
            limit=limit,
            start_key=start_key,
            revision=revision,
        )
    except CompactedError as exc:
        raise ApiError(
            expired(CONTINUE_EXPIRED_INCONSISTENT, encode_continue(start_key, prefix, LATEST))
        ) from exc
    meta: JSON = {"resourceVersion": str(page.resource_version)}
    if page.last_key is not None:
        # The next page starts right after the last key looked at ("\x00" sorts first).
        meta["continue"] = encode_continue(page.last_key + "\x00", prefix, page.resource_version)
        if page.remaining is not None:
            meta["remainingItemCount"] = page.remaining
    return {"kind": rtype.list_kind, "apiVersion": rtype.api_version, "metadata": meta, "items": page.items}
