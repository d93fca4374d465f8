"""One Lambda cold start, measured in a fresh interpreter (run by ``benchmarks/cold_start.py``).

Reads a job from stdin, imports the handler module, then makes its first invocation, and prints
the two durations as JSON. Only the standard library is imported before the clock starts, so the
import time is the handler module's own (with everything it pulls in), as on Lambda's init phase.
The AWS endpoint (moto's server in the parent) comes from ``AWS_ENDPOINT_URL``; the Kubernetes
API server (the fake one in the parent) is handed to the runtime as a static endpoint, which skips
the one eks:DescribeCluster call a deployed function makes per container.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import uuid
from typing import Any


class Context:
    """The attributes Powertools reads from the Lambda context object."""

    def __init__(self, function_name: str, memory_mb: int) -> None:
        self.function_name = function_name
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:us-west-2:123456789012:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "cold-start"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def _install_nodeheal_runtime(kube_url: str) -> None:
    """The deployed runtime's own AWS client factory: it finds the asset's trimmed models itself."""
    from nodeheal.runtime import LambdaEnvironment, Runtime, aws_client_factory, install_runtime

    def kube_provider() -> Any:
        from nodeheal.kube.client import StaticClientProvider

        return StaticClientProvider(kube_url)

    install_runtime(
        Runtime(
            LambdaEnvironment.from_environ(os.environ),
            client_factory=aws_client_factory(os.environ["AWS_REGION"]),
            kube_provider_factory=kube_provider,
        )
    )


def main() -> int:
    job = json.loads(sys.stdin.read())
    module_name, function_name = str(job["handler"]).rsplit(".", 1)
    started = time.perf_counter()
    module = importlib.import_module(module_name)
    imported = time.perf_counter()
    handler = getattr(module, function_name)
    before_invoke = time.perf_counter()
    if job.get("nodeheal"):
        _install_nodeheal_runtime(str(job["kubeUrl"]))
    error = ""
    result: Any = None
    try:
        result = handler(job["payload"], Context(str(job["function"]), int(job.get("memoryMb", 256))))
    except Exception as exc:  # reported to the parent, which decides whether the run counts
        error = f"{type(exc).__name__}: {exc}"
    invoked = time.perf_counter()
    print(
        json.dumps(
            {
                "importSeconds": imported - started,
                "invokeSeconds": invoked - before_invoke,
                "result": result,
                "error": error,
                "kubernetesImported": "kubernetes" in sys.modules,
                "pydanticImported": "pydantic" in sys.modules,
                "boto3Imported": "boto3" in sys.modules,
                "modules": len(sys.modules),
            },
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
