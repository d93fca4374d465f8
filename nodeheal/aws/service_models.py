"""Trimmed botocore service models: a cold Lambda container's clients without the operations it never calls.

botocore builds a client from the service's whole model. EC2's is 4,400 shapes (0.5 MB gzipped, a
9 MB JSON document): parsing it is the largest single cost of the cold start of the two functions
that call EC2 (terminate and reboot), which call three of its operations. DynamoDB's model (62
operations, 0.5 MB of JSON) costs every function that touches the ledger some 30 ms for the six it
calls; SNS, Step Functions and EKS the same in proportion. The Lambda asset carries a copy of each
service's model with only the operations the functions call and the shapes they reach, verbatim,
written at build time from the botocore that builds the asset; the runtime puts its directory first
on botocore's ``data_path`` (``AWS_DATA_PATH``, botocore's documented search path for models), so
the client serializes and parses exactly as with the full model for those operations and has no
others. Paginator, waiter and endpoint-rule files are not copied: botocore finds them in its own
data directory under the same API version.

``TRIMMED_OPERATIONS`` is the contract: a test fails when the code the functions run calls an
operation (or a paginator) of one of these services that is not in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: The directory, at the root of the Lambda asset, that holds the trimmed models.
MODELS_DIRECTORY = "botocore-models"

#: Service -> the operations the Lambda functions call, by the adapter that calls them.
TRIMMED_OPERATIONS: Mapping[str, tuple[str, ...]] = {
    # nodeheal/aws/ec2.py
    "ec2": (
        "DescribeCapacityReservations",
        "DescribeInstances",
        "RebootInstances",
        "ReportInstanceStatus",
        "TerminateInstances",
    ),
    # nodeheal/aws/ledger.py
    "dynamodb": ("DeleteItem", "GetItem", "PutItem", "Query", "Scan", "UpdateItem"),
    # nodeheal/aws/notify.py
    "sns": ("Publish",),
    # nodeheal/runtime.py (SfnExecutionStarter) and nodeheal/aws/executions.py
    "stepfunctions": ("DescribeExecution", "GetExecutionHistory", "ListExecutions", "StartExecution"),
    # nodeheal/kube/eks_auth.py (the cluster directory of EksClientProvider)
    "eks": ("DescribeCluster",),
}


def trim_service_model(model: Mapping[str, Any], operations: Iterable[str]) -> dict[str, Any]:
    """The model with only ``operations`` and every shape they reach; documentation dropped."""
    wanted = list(operations)
    missing = [name for name in wanted if name not in model["operations"]]
    if missing:
        raise ValueError(f"the service model has no operation(s) {', '.join(missing)}")
    kept_operations = {name: without_documentation(model["operations"][name]) for name in wanted}
    shapes: Mapping[str, Any] = model["shapes"]
    reachable: set[str] = set()
    pending = [ref for operation in kept_operations.values() for ref in _operation_shapes(operation)]
    while pending:
        name = pending.pop()
        if name in reachable:
            continue
        reachable.add(name)
        pending.extend(_member_shapes(shapes[name]))
    trimmed: dict[str, Any] = {key: value for key, value in model.items() if key not in _REBUILT_KEYS}
    trimmed["operations"] = kept_operations
    trimmed["shapes"] = {name: without_documentation(shapes[name]) for name in sorted(reachable)}
    return trimmed


def write_trimmed_models(target: Path, loader: Any | None = None) -> list[Path]:
    """Write each trimmed model under ``target`` in botocore's layout
    (``ec2/2016-11-15/service-2.json``) from ``loader``'s models (botocore's own by default)."""
    if loader is None:
        from botocore.loaders import create_loader

        loader = create_loader()
    written: list[Path] = []
    for service, operations in TRIMMED_OPERATIONS.items():
        api_version = loader.determine_latest_version(service, "service-2")
        model = loader.load_service_model(service, "service-2", api_version=api_version)
        path = target / service / api_version / "service-2.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trim_service_model(model, operations), separators=(",", ":")))
        written.append(path)
    return written


def bundled_models_directory(package_root: Path) -> Path | None:
    """The asset's trimmed models next to the ``nodeheal`` package, if this is a Lambda asset."""
    candidate = package_root / MODELS_DIRECTORY
    return candidate if candidate.is_dir() else None


_REBUILT_KEYS = frozenset({"operations", "shapes", "documentation"})


def _operation_shapes(operation: Mapping[str, Any]) -> list[str]:
    refs = [operation[key]["shape"] for key in ("input", "output") if key in operation]
    refs.extend(error["shape"] for error in operation.get("errors", []))
    return refs


def _member_shapes(shape: Mapping[str, Any]) -> list[str]:
    refs = [member["shape"] for member in shape.get("members", {}).values()]
    refs.extend(shape[key]["shape"] for key in ("member", "key", "value") if key in shape)
    return refs


def without_documentation(value: Any) -> Any:
    """``value`` (a model or any part of one) without its documentation strings."""
    if isinstance(value, dict):
        return {key: without_documentation(item) for key, item in value.items() if key != "documentation"}
    if isinstance(value, list):
        return [without_documentation(item) for item in value]
    return value
