"""Lambda cold start: every handler's import and first invocation, against a bare boto3 handler.

Each measurement is a fresh interpreter (``benchmarks/cold_child.py``) talking to moto's server
(AWS, with the synthesized stack deployed) and the fake Kubernetes API server, both in this
process. The functions run from the Lambda asset itself, built as ``cdk synth`` builds it
(nodeheal.cdk.lambda_asset: the wheels, the sources, the trimmed service models, the bytecode),
alone on the path as in /var/task, with boto3 and botocore from this interpreter as the runtime
provides them. The asset's bytecode is compiled for the interpreter that measures, standing in for
the runtime's Python 3.12 that a synth compiles for; each round also runs every function from the
same asset stripped of its bytecode, which is what a synth on a machine without Python 3.12 ships.

The handlers run a real remediation, step by step in the order the state machine would run them,
so each first invocation does its real work: admit re-reads the Node, takes the lock and the
budget slot; cordon patches the Node; drain evicts; terminate/reboot call EC2; record writes the
ledger and publishes to SNS.

    .venv/bin/python benchmarks/cold_start.py [--runs 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import ROOT, XID_48, XID_79, Stack, median, open_stack
from benchmarks.harness import production_context as cdk_context
from nodeheal.cdk.bytecode import identify
from nodeheal.cdk.lambda_asset import build as build_asset
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.sim.stack.context import deep_merge
from nodeheal.timestamps import format_timestamp, utc_now

CHILD = Path(__file__).with_name("cold_child.py")
BARE_HANDLER = "benchmarks.bare_boto3_handler.handler"

#: Production timings except where a benchmark with no waiting needs otherwise: budgets wide
#: enough for every run's remediations, and tiny waits for the executions ingest starts here.
CONTEXT_OVERRIDES: dict[str, Any] = {
    "budgets": {"maxInFlight": 100, "maxPerHour": 1000, "maxUnhealthyPoolShare": 1.0},
    "drain": {"pollSeconds": 1, "timeoutSeconds": 5, "doNotDisruptWaitSeconds": 0, "forceGraceSeconds": 0},
    "reboot": {"pollSeconds": 1, "recoveryTimeoutSeconds": 5},
    "retry": {"intervalSeconds": 1, "maxAttempts": 2, "backoffRate": 1.0},
}

#: Where each task writes its result in the execution state (the state machine's ResultPath).
RESULT_KEYS = {
    "lambdas.admit.handler": "admission",
    "lambdas.read_capacity.handler": "admission",
    "lambdas.cordon.handler": "cordon",
    "lambdas.drain.handler": "drain",
    "lambdas.force_drain.handler": "drain",
    "lambdas.terminate.handler": "instance",
    "lambdas.reboot.handler": "instance",
    "lambdas.check_recovery.handler": "recovery",
    "lambdas.uncordon.handler": "uncordon",
    "lambdas.record.handler": "record",
    "lambdas.record_failure.handler": "record",
}

#: One import statement timed in a fresh interpreter, after what every Lambda container has loaded
#: anyway (botocore brings urllib3), so the figure is what the statement itself adds.
IMPORT_CHILD = """
import sys, time
import urllib3
started = time.perf_counter()
{statement}
print(time.perf_counter() - started)
"""

#: The Kubernetes transport's import, before and after the remediation functions stopped using the
#: generated client: what the first Kubernetes call of a cold container pays for it.
TRANSPORT_IMPORTS = {
    "generatedClientMs": "from kubernetes.client import ApiClient, Configuration",
    "nodehealTransportMs": "import nodeheal.kube.nodes, nodeheal.kube.pods",
}


class ColdStartRig:
    """moto's HTTP server over the in-process stack, and the environment of each function."""

    def __init__(self, stack: Stack, endpoint: str, assets: Mapping[str, Path]) -> None:
        self.stack = stack
        self.endpoint = endpoint
        #: Variant -> the asset directory the functions run from (see the module's docstring).
        self.assets = assets
        self.functions = stack.aws.app.functions()
        self.memory = {
            logical: int(resource.get("Properties", {}).get("MemorySize", 128))
            for logical, resource in stack.aws.app.resources("AWS::Lambda::Function").items()
        }

    def environment(self, logical: str, code_path: Path) -> dict[str, str]:
        runtime_env = self.stack.aws.runtime_for(logical).environment
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AWS_", "NODEHEAL_", "POWERTOOLS_"))
        }
        env.update(
            {
                key: value
                for key, value in self.functions[logical].environment.items()
                if isinstance(value, str)
            }
        )
        resolved = {
            "NODEHEAL_LEDGER_TABLE": runtime_env.ledger_table,
            "NODEHEAL_TOPIC_ARN": runtime_env.topic_arn,
            "NODEHEAL_STATE_MACHINE_ARN": runtime_env.state_machine_arn,
            "NODEHEAL_CLUSTERS": ",".join(sorted(runtime_env.clusters)),
        }
        env.update({key: value for key, value in resolved.items() if value})
        env.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": self.stack.aws.region,
                "AWS_DEFAULT_REGION": self.stack.aws.region,
                "AWS_LAMBDA_FUNCTION_NAME": logical,
                # The asset alone, as /var/task: nothing of the checkout is importable.
                "PYTHONPATH": str(code_path),
                "PYTHONDONTWRITEBYTECODE": "1",
                "POWERTOOLS_METRICS_DISABLED": "false",
            }
        )
        return env

    def run(
        self, handler: str, payload: Any, *, variant: str = "bytecode", env_of: str | None = None
    ) -> dict[str, Any]:
        nodeheal = handler != BARE_HANDLER
        logical = env_of or self.stack.aws.function_logical_id(handler)
        job = {
            "handler": handler,
            "payload": payload,
            "function": logical,
            "memoryMb": self.memory.get(logical, 256),
            "nodeheal": nodeheal,
            "kubeUrl": self.stack.server.url,
        }
        completed = subprocess.run(
            [sys.executable, str(CHILD)],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            env=self.environment(logical, self.assets[variant] if nodeheal else ROOT),
            cwd=str(self.assets[variant] if nodeheal else ROOT),
            timeout=120,
            check=False,
        )
        lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
        if completed.returncode != 0 or not lines:
            raise RuntimeError(f"{handler} child failed: {completed.stderr[-2000:]}")
        # Powertools logs JSON lines to stdout too; the measurement is the last line.
        measured: dict[str, Any] = json.loads(lines[-1])
        if measured["error"]:
            raise RuntimeError(f"{handler} failed on its first invocation: {measured['error']}")
        return measured


def _initial_state(detail: Mapping[str, Any], name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the state machine's "Load settings" state hands the first task."""
    now = format_timestamp(utc_now(), millis=True)
    return {
        "event": dict(detail),
        "eventId": str(uuid.uuid4()),
        "receivedAt": now,
        "settings": dict(settings),
        "execution": {
            "name": name,
            "id": f"arn:aws:states:us-west-2:123456789012:execution:NodeHeal:{name}",
            "startedAt": now,
        },
    }


#: The asset variants measured each round: as a synth with Python 3.12 at hand builds it, and as one
#: without builds it.
VARIANTS = ("bytecode", "source")


def _one_round(
    rig: ColdStartRig, round_index: int, settings: Mapping[str, Any], variant: str
) -> dict[str, dict[str, Any]]:
    """One remediation of each path, every function cold, run from the ``variant`` asset."""
    stack = rig.stack
    measured: dict[str, dict[str, Any]] = {}
    tag = f"{variant[0]}{round_index}"

    def run(handler: str, payload: Any) -> dict[str, Any]:
        return rig.run(handler, payload, variant=variant)

    def step(handler: str, state: dict[str, Any]) -> None:
        result = run(handler, state)
        state[RESULT_KEYS[handler]] = result["result"]
        measured.setdefault(handler, result)

    # Ingest: a real event. The execution it starts runs here in the parent; the node is healthy
    # again by then, so that execution stops at admit and does not race the steps below.
    ingest_node = f"cold-i{tag}"
    stack.add_gpu_node(ingest_node, workload_pods=0)
    detail = stack.fault(ingest_node, "GPUProblem", "True", "GPUHardwareError", XID_79)
    stack.store.set_node_condition(ingest_node, "GPUProblem", "False", "GPUHealthy", "GPUs healthy")
    ingest = run("lambdas.ingest.handler", stack.envelope(detail))
    if ingest["result"].get("status") != "started":
        raise RuntimeError(f"ingest did not start an execution: {ingest['result']}")
    measured["lambdas.ingest.handler"] = ingest

    replace_node = f"cold-r{tag}"
    stack.add_gpu_node(replace_node)
    detail = stack.fault(replace_node, "GPUProblem", "True", "GPUHardwareError", XID_79)
    state = _initial_state(detail, f"bench-cold-{tag}-replace-{uuid.uuid4().hex[:6]}", settings)
    step("lambdas.admit.handler", state)
    if state["admission"].get("verdict") != "proceed":
        raise RuntimeError(f"admit did not proceed: {state['admission']}")
    for handler in (
        "lambdas.read_capacity.handler",
        "lambdas.cordon.handler",
        "lambdas.drain.handler",
        "lambdas.force_drain.handler",
        "lambdas.terminate.handler",
        "lambdas.record.handler",
    ):
        step(handler, state)

    reboot_node = f"cold-b{tag}"
    stack.add_gpu_node(reboot_node)
    detail = stack.fault(reboot_node, "GPUProblem", "True", "GPUHardwareError", XID_48)
    state = _initial_state(detail, f"bench-cold-{tag}-reboot-{uuid.uuid4().hex[:6]}", settings)
    for handler in ("lambdas.admit.handler", "lambdas.cordon.handler", "lambdas.drain.handler"):
        result = run(handler, state)
        state[RESULT_KEYS[handler]] = result["result"]
    step("lambdas.reboot.handler", state)
    # The simulated node comes back from the reboot with a new boot ID and a clean detector.
    stack.store.reboot_node(reboot_node)
    stack.store.set_node_condition(reboot_node, "GPUProblem", "False", "GPUHealthy", "GPUs healthy")
    step("lambdas.check_recovery.handler", state)
    step("lambdas.uncordon.handler", state)
    state["failure"] = {"Error": "ColdStartMeasurement", "Cause": "record-failure path exercised"}
    step("lambdas.record_failure.handler", state)
    return measured


def _import_seconds(statement: str, runs: int) -> float:
    """Median seconds of one import statement in a fresh interpreter."""
    samples = []
    for _ in range(runs):
        completed = subprocess.run(
            [sys.executable, "-c", IMPORT_CHILD.format(statement=statement)],
            capture_output=True,
            text=True,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=True,
        )
        samples.append(float(completed.stdout.split()[0]))
    return median(samples)


#: Each handler's cold start, as a multiple of the bare boto3 handler's, stays under this.
TARGET_RATIO = 1.8
#: Rounds measured by default: the machine is noisy, the median of ten is not.
DEFAULT_RUNS = 10


#: Bare-handler starts per round, of which the median is the round's baseline.
BARE_TRIES = 3


def total(result: Mapping[str, Any]) -> float:
    """A cold start's import and first invocation, in seconds."""
    return float(result["importSeconds"]) + float(result["invokeSeconds"])


def build_assets(directory: Path) -> dict[str, Path]:
    """The two variants of the Lambda asset, built under ``directory``."""
    compiled = directory / "bytecode"
    build_asset(compiled, compiler=identify(sys.executable))
    sources = directory / "source"
    shutil.copytree(compiled, sources, ignore=shutil.ignore_patterns("__pycache__"))
    return {"bytecode": compiled, "source": sources}


def measure(runs: int = DEFAULT_RUNS, variants: tuple[str, ...] = VARIANTS) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    context = deep_merge(cdk_context(), CONTEXT_OVERRIDES)
    settings = NodeHealConfig.from_cdk_context(context).remediation.to_json()
    #: Variant -> handler -> one result per round.
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {variant: {} for variant in variants}
    bare: list[dict[str, Any]] = []
    with (
        open_stack(context, time_scale=0.001) as stack,
        tempfile.TemporaryDirectory(prefix="nodeheal-cold-asset-") as scratch,
    ):
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            rig = ColdStartRig(stack, f"http://{host}:{port}", build_assets(Path(scratch)))
            record_logical = stack.aws.function_logical_id("lambdas.record.handler")
            for round_index in range(runs):
                # The round's baseline is the median of three: one fast or slow bare start would
                # move every ratio of its round the other way.
                tries = [rig.run(BARE_HANDLER, {}, env_of=record_logical) for _ in range(BARE_TRIES)]
                bare.append(sorted(tries, key=total)[BARE_TRIES // 2])
                for variant in variants:
                    for handler, result in _one_round(rig, round_index, settings, variant).items():
                        samples[variant].setdefault(handler, []).append(result)
        finally:
            server.stop()
        memory = {spec.handler: rig.memory.get(logical, 256) for logical, spec in rig.functions.items()}

    def summary(runs_of: list[dict[str, Any]], handler: str) -> dict[str, Any]:
        import_s = median([r["importSeconds"] for r in runs_of])
        invoke_s = median([r["invokeSeconds"] for r in runs_of])
        return {
            "importMs": import_s * 1000,
            "firstInvokeMs": invoke_s * 1000,
            "totalMs": (import_s + invoke_s) * 1000,
            "kubernetesImported": any(r["kubernetesImported"] for r in runs_of),
            "pydanticImported": any(r["pydanticImported"] for r in runs_of),
            "boto3Imported": any(r["boto3Imported"] for r in runs_of),
            "memoryMb": memory.get(handler, 128),
        }

    def ratio(runs_of: list[dict[str, Any]]) -> float:
        """Median over the rounds of the handler's cold start against the bare handler's of the same
        round: a round's pair ran seconds apart, so a busy spell of the machine slows both."""
        return median([total(mine) / total(base) for mine, base in zip(runs_of, bare, strict=True)])

    measured = {
        variant: {
            handler: {**summary(runs_of, handler), "ratio": ratio(runs_of)}
            for handler, runs_of in sorted(by_handler.items())
        }
        for variant, by_handler in samples.items()
    }
    return {
        "runs": runs,
        "bytecodeFor": f"Python {sys.version_info[0]}.{sys.version_info[1]}",
        "baseline": summary(bare, BARE_HANDLER),
        "handlers": measured["bytecode"],
        "worstRatio": max(h["ratio"] for h in measured["bytecode"].values()),
        "sourceOnly": measured.get("source", {}),
        "worstSourceOnlyRatio": max((h["ratio"] for h in measured.get("source", {}).values()), default=None),
        "transportImport": {
            key: 1000 * _import_seconds(statement, max(runs, 5))
            for key, statement in TRANSPORT_IMPORTS.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--bytecode-only", action="store_true", help="skip the sources-only variant (half the time)"
    )
    args = parser.parse_args()
    result = measure(args.runs, ("bytecode",) if args.bytecode_only else VARIANTS)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    base = result["baseline"]
    print(f"bare boto3 handler: import {base['importMs']:.0f} ms + first call {base['firstInvokeMs']:.0f} ms")
    plain_too = bool(result["sourceOnly"])
    heading = "function (asset with bytecode" + (" | sources only)" if plain_too else ")")
    print(f"{heading:<34} {'import':>8} {'first call':>11}")
    for handler, row in result["handlers"].items():
        line = f"{handler:<34} {row['importMs']:6.0f} ms {row['firstInvokeMs']:8.0f} ms  x{row['ratio']:.2f}"
        if plain_too:
            plain = result["sourceOnly"][handler]
            line += f"  |  {plain['importMs']:4.0f} ms {plain['firstInvokeMs']:6.0f} ms"
            line += f"  x{plain['ratio']:.2f}"
        imported = f"boto3={'yes' if row['boto3Imported'] else 'no'}"
        print(f"{line}  {imported} kubernetes={'yes' if row['kubernetesImported'] else 'no'}")
    print(json.dumps(result["transportImport"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
