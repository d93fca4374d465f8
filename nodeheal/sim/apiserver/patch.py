"""The three patch types of the Kubernetes API, applied to plain JSON objects.

Strategic merge patch needs the patch strategy of each list field; the table below copies the
`patchStrategy` / `patchMergeKey` struct tags of k8s.io/api for the kinds the simulator serves.
A list without an entry is replaced wholesale, which is why a patch of `spec.taints` replaces the
node's taints (NodeSpec.Taints carries no strategy) while `status.conditions` merges by `type`.
"""

from __future__ import annotations

from typing import Any

from nodeheal.sim.apiserver.codec import copy_json
from nodeheal.sim.apiserver.status import bad_request, unprocessable_patch

JSON = dict[str, Any]

_METADATA: dict[str, tuple[str, str | None]] = {
    "metadata.finalizers": ("merge", None),
    "metadata.ownerReferences": ("merge", "uid"),
}

_CONTAINER = {
    "ports": ("merge", "containerPort"),
    "env": ("merge", "name"),
    "volumeMounts": ("merge", "mountPath"),
    "volumeDevices": ("merge", "devicePath"),
}


def _containers(prefix: str) -> dict[str, tuple[str, str | None]]:
    out: dict[str, tuple[str, str | None]] = {prefix: ("merge", "name")}
    for field, strategy in _CONTAINER.items():
        out[f"{prefix}[].{field}"] = strategy
    return out


PATCH_STRATEGIES: dict[str, dict[str, tuple[str, str | None]]] = {
    "Node": {
        **_METADATA,
        "spec.podCIDRs": ("merge", None),
        "status.conditions": ("merge", "type"),
        "status.addresses": ("merge", "type"),
    },
    "Pod": {
        **_METADATA,
        **_containers("spec.containers"),
        **_containers("spec.initContainers"),
        **_containers("spec.ephemeralContainers"),
        "spec.volumes": ("merge", "name"),
        "spec.imagePullSecrets": ("merge", "name"),
        "status.conditions": ("merge", "type"),
        "status.podIPs": ("merge", "ip"),
        "status.hostIPs": ("merge", "ip"),
    },
    "PodDisruptionBudget": {**_METADATA, "status.conditions": ("merge", "type")},
    "Lease": dict(_METADATA),
    "Event": dict(_METADATA),
}

_DIRECTIVE_PREFIXES = ("$setElementOrder/", "$deleteFromPrimitiveList/", "$retainKeys")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    result = copy_json(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(kind: str, target: JSON, patch: Any) -> JSON:
    if not isinstance(patch, dict):
        raise bad_request("unable to find api field in struct for the patch: patch must be a JSON object")
    strategies = PATCH_STRATEGIES.get(kind, _METADATA)
    merged = _merge_map(copy_json(target), patch, "", strategies)
    if merged is None:
        raise bad_request("a strategic merge patch cannot delete the whole object")
    return merged


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _merge_map(
    original: JSON, patch: JSON, path: str, strategies: dict[str, tuple[str, str | None]]
) -> JSON | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy_json(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise bad_request(f"Unknown patch type: {directive} in map: {patch}")
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        original = {k: v for k, v in original.items() if k in retain}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            current = original.get(field)
            if isinstance(current, list) and isinstance(value, list):
                original[field] = [item for item in current if item not in value]
    for key, value in patch.items():
        if key == "$patch" or key.startswith(_DIRECTIVE_PREFIXES):
            continue
        child = _child(path, key)
        if value is None:
            original.pop(key, None)
            continue
        current = original.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged = _merge_map(current, value, child, strategies)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, dict):
            merged = _merge_map({}, value, child, strategies)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list):
            original[key] = _merge_list(
                current if isinstance(current, list) else [], value, child, strategies
            )
        else:
            original[key] = copy_json(value)
    return original


def _merge_list(
    original: list[Any], patch: list[Any], path: str, strategies: dict[str, tuple[str, str | None]]
) -> list[Any]:
    strategy, merge_key = strategies.get(path, ("replace", None))
    if strategy != "merge":
        return [_strip_directives(item) for item in patch]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(i) for i in patch if not (isinstance(i, dict) and i.get("$patch"))]
    if merge_key is None:
        result = list(original)
        for item in patch:
            if item not in result:
                result.append(copy_json(item))
        return result
    result = [copy_json(item) for item in original]
    item_path = f"{path}[]"
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
        index = next(
            (
                i
                for i, cur in enumerate(result)
                if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            created = _merge_map({}, item, item_path, strategies)
            if created is not None:
                result.append(created)
        else:
            merged = _merge_map(result[index], item, item_path, strategies)
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if k != "$patch" and not k.startswith(_DIRECTIVE_PREFIXES)
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise unprocessable_patch(f"JSON pointer must start with '/': {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _resolve_parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    if not parts:
        raise unprocessable_patch(f"cannot operate on the document root: {path!r}")
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise unprocessable_patch(f"doc is missing path: {path!r}")
    return cur, parts[-1]


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for part in _pointer(path):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise unprocessable_patch(f"doc is missing path: {path!r}")
    return cur


def _add(doc: Any, path: str, value: Any) -> None:
    parent, last = _resolve_parent(doc, _pointer(path), path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise unprocessable_patch(f"add operation does not apply: index out of range: {path!r}")
    else:
        raise unprocessable_patch(f"add operation does not apply: doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parent, last = _resolve_parent(doc, _pointer(path), path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise unprocessable_patch(f"remove operation does not apply: doc is missing path: {path!r}")


def json_patch(target: JSON, operations: Any) -> JSON:
    """RFC 6902 JSON patch; a failed `test` or a missing path is a 422, like the real server."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc: Any = copy_json(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid JSON patch operation: {op}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            _add(doc, path, copy_json(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            if path == "":
                doc = copy_json(op.get("value"))
            else:
                _remove(doc, path)
                _add(doc, path, copy_json(op.get("value")))
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f"{kind} operation requires 'from': {op}")
            value = copy_json(_get(doc, source))
            if kind == "move":
                _remove(doc, source)
            _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise unprocessable_patch(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    if not isinstance(doc, dict):
        raise unprocessable_patch("patch result is not an object")
    return doc
