"""The ``aws`` command line, as far as the docs use it, over boto3: a test puts it on PATH as ``aws``
and runs a document's shell commands as written (``python -m tests.aws_cli SERVICE OPERATION ...``).

``aws SERVICE OPERATION [--param VALUE]... [--query EXPRESSION] [--output json|text]``: the
operation and its parameters are named as the AWS CLI derives them from the service model
(``disable-rule``, ``--event-bus-name`` -> ``DisableRule(EventBusName=...)``), and typed as it takes
them: a structure, list or map is JSON, a number is parsed, a boolean is a flag (``--x`` /
``--no-x``), anything else is the string given. ``--query`` is the JMESPath expression the CLI
applies to the response, and ``--output text`` prints a result's values tab-separated, as the CLI
does for a scalar or a list of scalars. Not supported: shorthand syntax, ``file://`` values,
pagination options. The endpoint is boto3's (``AWS_ENDPOINT_URL`` points it at moto's server).
An unknown operation or parameter, and an error AWS returns, end with exit 255 and the error on
stderr, as with the AWS CLI.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import boto3
import jmespath
from botocore import xform_name
from botocore.exceptions import ClientError, ParamValidationError

SCALAR_TYPES = {"integer": int, "long": int, "float": float, "double": float}


def _value(shape: Any, raw: str) -> Any:
    if shape.type_name in ("structure", "list", "map"):
        return json.loads(raw)
    if shape.type_name in SCALAR_TYPES:
        return SCALAR_TYPES[shape.type_name](raw)
    return raw


def _text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, list) and all(not isinstance(item, dict | list) for item in result):
        return "\t".join(str(item) for item in result)
    if isinstance(result, dict | list):
        return json.dumps(result, default=str)
    return str(result)


def run(argv: Sequence[str]) -> str:
    """The output of ``aws *argv``; raises SystemExit(255) on an error, as the AWS CLI exits."""
    if len(argv) < 2:
        raise SystemExit("usage: aws SERVICE OPERATION [--param VALUE]...")
    service, command, *rest = argv
    client = boto3.client(service)
    model = client.meta.service_model
    operations = {xform_name(name, "-"): name for name in model.operation_names}
    if command not in operations:
        raise SystemExit(f"aws: {service} has no operation {command}")
    operation = model.operation_model(operations[command])
    members = operation.input_shape.members if operation.input_shape else {}
    options = {xform_name(name, "-"): (name, shape) for name, shape in members.items()}
    params: dict[str, Any] = {}
    query, output = None, "json"
    words = list(rest)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            raise SystemExit(f"aws: unexpected argument {word!r}")
        option = word[2:]
        if option in ("query", "output"):
            if option == "query":
                query = words.pop(0)
            else:
                output = words.pop(0)
            continue
        negated = option.startswith("no-") and option[3:] in options
        name, shape = options.get(option[3:] if negated else option, (None, None))
        if name is None:
            raise SystemExit(f"aws: {service} {command} has no option --{option}")
        if shape.type_name == "boolean":
            params[name] = not negated
            continue
        params[name] = _value(shape, words.pop(0))
    try:
        response = getattr(client, xform_name(operation.name))(**params)
    except (ClientError, ParamValidationError) as error:
        print(f"\nAn error occurred: {error}", file=sys.stderr)
        raise SystemExit(255) from None
    response.pop("ResponseMetadata", None)
    result = jmespath.search(query, response) if query else response
    if output == "text":
        return _text(result)
    return "" if result is None or result == {} else json.dumps(result, indent=4, default=str)


def main(argv: Sequence[str] | None = None) -> int:
    printed = run(sys.argv[1:] if argv is None else argv)
    if printed:
        print(printed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
