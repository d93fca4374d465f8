"""What the local harness changes in moto and botocore while a pipeline runs, each written for the
version named here.

Two kinds. **Correctness**: where moto behaves unlike AWS in a way NodeHeal's workflow would see
(``States.DataLimitExceeded`` is terminal; ``$$.Execution.StartTime`` is a string). **Speed**:
where moto's or botocore's cost grows with what a storm leaves behind, or repeats work whose answer
cannot change; a speed patch gives exactly the answer unpatched moto gives. Each reaches into
internals of :data:`MOTO_VERSION` (or the botocore it names), and
``tests/unit/sim/test_local_aws_patches.py`` fails when the version or an internal it relies on
changes: review the patches before moving the pin in requirements-dev.txt.

:func:`start` starts them all, in order, and returns the patchers for the harness to stop;
:func:`skip_default_amis` and :func:`warm_moto_routing` change no code and have nothing to stop.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from datetime import datetime
from typing import Any
from unittest import mock

from botocore.loaders import create_loader

from nodeheal.payload import STATE_LIMIT_BYTES
from nodeheal.timestamps import format_timestamp

#: The moto release every patch here was written for and checked against.
MOTO_VERSION = "5.2.5"

#: The services the local pipeline's requests reach moto for.
MOTO_SERVICES = ("dynamodb", "ec2", "events", "lambda", "sns", "sqs", "stepfunctions")

#: botocore model loaders by data path, shared by every session the harness makes in this process.
_SHARED_LOADERS: dict[str | None, Any] = {}
_SHARED_LOADERS_LOCK = threading.Lock()


def _started(*patchers: Any) -> list[Any]:
    """Start each patcher and return them, for the harness to stop."""
    for patcher in patchers:
        patcher.start()
    return list(patchers)


def start() -> list[Any]:
    """Start every patch (moto's mock must already be started, but no backend used yet: moto
    builds them on first use) and return the started patchers."""
    skip_default_amis()
    started = [patch_terminal_data_limit()]
    for patch in (
        serve_start_time_as_text,
        share_model_loaders,
        parse_each_definition_once,
        validate_definitions_through_the_cache,
        scan_sqs_queues_once,
        read_one_partition_per_query,
        write_dynamodb_items_as_json,
        parse_each_jsonpath_once,
        share_task_clients,
        copy_state_data_as_json,
        list_response_methods_once,
        sign_requests_without_signatures,
    ):
        started += patch()
    warm_moto_routing()
    return started


def skip_default_amis() -> None:
    """Speed (moto 5.2.5, ``AmiBackend._load_amis``): moto builds each region's EC2 backend with its
    default AMIs, a snapshot and a volume each: most of a second of CPU per pipeline, for images
    nothing here reads. The instances name an image that is then not registered, which moto accepts
    unless MOTO_ENABLE_AMI_VALIDATION is set. Must run before the EC2 backend is first used; a value
    already in the environment is kept."""
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


def serve_start_time_as_text() -> list[Any]:
    """Correctness (moto 5.2.5, ``ExecutionWorker._get_evaluation_environment``): Step Functions
    gives ``$$.Execution.StartTime`` as an ISO 8601 string; moto hands the workflow a datetime,
    which then breaks its own DescribeExecution. Serve the string, as AWS does."""
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original = ExecutionWorker._get_evaluation_environment

    def environment(worker: Any) -> Any:
        env = original(worker)
        execution = env.states.context_object.context_object_data["Execution"]
        start_time = execution.get("StartTime")
        if isinstance(start_time, datetime):
            execution["StartTime"] = format_timestamp(start_time, millis=True)
        return env

    return _started(mock.patch.object(ExecutionWorker, "_get_evaluation_environment", environment))


def share_model_loaders() -> list[Any]:
    """Speed (botocore 1.44, ``botocore.session.create_loader``; moto 5.2.5): every botocore
    session loads the service models from botocore's JSON files again
    (botocore 1.44: one ``Loader`` per session, caching what it loaded for that session
    alone), and the harness makes many: moto 5.2.5 drops boto3's default session when a mock
    starts, and each function's runtime builds its own, as a Lambda container does once. That
    was a fifth of a pipeline's CPU, EC2's model alone being megabytes of JSON. The harness's
    sessions share one loader per data path instead, which loads each model once per process;
    botocore never changes a model it loaded (the sessions of one loader already share them)."""
    import botocore.session

    def shared_loader(search_path_string: str | None = None) -> Any:
        with _SHARED_LOADERS_LOCK:
            loader = _SHARED_LOADERS.get(search_path_string)
            if loader is None:
                loader = _SHARED_LOADERS[search_path_string] = create_loader(search_path_string)
            return loader

    return _started(mock.patch.object(botocore.session, "create_loader", shared_loader))


def parse_each_definition_once() -> list[Any]:
    """Speed (moto 5.2.5, ``ExecutionWorker._get_evaluation_entrypoint``): moto parses the state
    machine's ASL with its ANTLR grammar and builds an evaluation program from the tree at the start
    of every execution (~40 ms of pure Python to parse NodeHeal's definition and ~35 ms to build the
    program, so over a minute of CPU for a 1,000-execution storm). Both depend on the definition
    text alone: each is made once per definition and every execution evaluates the same program
    (:func:`evaluation_program` says why sharing it is sound)."""
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    def entrypoint(worker: Any) -> Any:
        return evaluation_program(worker._evaluation_details.state_machine_details.definition)

    return _started(mock.patch.object(ExecutionWorker, "_get_evaluation_entrypoint", entrypoint))


def validate_definitions_through_the_cache() -> list[Any]:
    """Speed (moto 5.2.5, ``StepFunctionsParserBackend._validate_definition``): CreateStateMachine
    and UpdateStateMachine validate the definition by parsing it with the same grammar: about a
    second of CPU for every pipeline started, though most start with a definition already
    parsed. The parse goes through the same cache; a definition that does not parse still
    fails exactly as moto fails it (the cache keeps only trees, never errors)."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import ASLParserException
    from moto.stepfunctions.parser.models import InvalidDefinition, StepFunctionsParserBackend

    def validate(definition: str) -> None:
        try:
            parse_tree(definition)
        except ASLParserException as asl_parser_exception:
            raise InvalidDefinition(message=repr(asl_parser_exception)) from None
        except Exception as exception:
            raise InvalidDefinition(
                message=f"Error={exception.__class__.__name__} Args={list(exception.args)} "
                f"in definition '{definition}'."
            ) from None

    return _started(
        mock.patch.object(StepFunctionsParserBackend, "_validate_definition", staticmethod(validate))
    )


def share_task_clients() -> list[Any]:
    """Speed (moto 5.2.5, ``lambda_eval_utils.boto_client_for``): moto's Lambda task integration
    creates a new boto3 client for every invocation (a few
    milliseconds of model loading each, and creating clients is not thread-safe); the same
    client, built the same way, serves every invocation of a region instead."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

    clients: dict[tuple[str, str], Any] = {}
    lock = threading.Lock()

    def shared_client(region: str, service: str, state_credentials: Any = None) -> Any:
        with lock:
            client = clients.get((region, service))
            if client is None:
                client = clients[(region, service)] = boto_client_for(
                    region=region, service=service, state_credentials=state_credentials
                )
            return client

    return _started(mock.patch.object(lambda_eval_utils, "boto_client_for", shared_client))


def parse_each_jsonpath_once() -> list[Any]:
    """Speed (moto 5.2.5, ``json_path.parse``, ``result_path.parse``; jsonpath-ng's ``parse``):
    moto evaluates every JSONPath of the state machine (each ``.$`` parameter, Choice
    variable and ResultPath) and of each rule target by parsing it anew, and jsonpath_ng builds
    its yacc parser for every parse: a few milliseconds each time, for a handful of distinct
    paths. Parsed paths are immutable, so each is parsed once."""
    started: list[Any] = []
    import jsonpath_ng
    import jsonpath_ng.ext
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for owner, name, replacement in (
        (jsonpath_ng.ext, "parse", _parse_extended_jsonpath),  # imported per call by moto.events
        (json_path, "parse", _parse_extended_jsonpath),
        (result_path, "parse", _parse_jsonpath),
    ):
        patcher = mock.patch.object(owner, name, replacement)
        patcher.start()
        started.append(patcher)
    return started


def copy_state_data_as_json() -> list[Any]:
    """Speed (moto 5.2.5, ``asl/eval/states.py``, ``asl/component/common/string/string_expression.py``
    and ``asl/component/state/exec/execute_state.py``): the interpreter deep-copies a state's input,
    result or output each time it reads one, several times per state: a twentieth of a storm's CPU
    in ``copy.deepcopy``. That data is JSON (it arrived as JSON text), so a copy that rebuilds its
    objects and arrays gives an equal value three times faster; any other type still goes to
    ``copy.deepcopy``."""
    import copy
    import types

    from moto.stepfunctions.parser.asl.component.common.string import string_expression
    from moto.stepfunctions.parser.asl.component.state.exec import execute_state
    from moto.stepfunctions.parser.asl.eval import states

    json_copy = types.SimpleNamespace(deepcopy=copy_json_value)
    started: list[Any] = []
    for module in (states, string_expression, execute_state):
        assert module.copy is copy, f"{module.__name__} no longer copies with the copy module"
        patcher = mock.patch.object(module, "copy", json_copy)
        patcher.start()
        started.append(patcher)
    return started


_JSON_SCALARS = (str, int, float, bool, type(None))


def copy_json_value(value: Any) -> Any:
    """A deep copy of ``value``: objects and arrays rebuilt, JSON scalars kept (they are immutable,
    as ``copy.deepcopy`` keeps them), anything else handed to ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {key: copy_json_value(item) for key, item in value.items()}
    if kind is list:
        return [copy_json_value(item) for item in value]
    if kind in _JSON_SCALARS:
        return value
    import copy

    return copy.deepcopy(value)


def list_response_methods_once() -> list[Any]:
    """Speed (moto 5.2.5, ``BaseResponse.call_action``): every request lists its response class's
    methods with ``inspect.getmembers`` to find the action's handler, a fiftieth of a storm's CPU.
    The list depends on the class alone, so it is made once per class."""
    from moto.core import responses

    listed = functools.lru_cache(maxsize=None)(responses.method_names_from_class)
    return _started(mock.patch.object(responses, "method_names_from_class", listed))


def sign_requests_without_signatures() -> list[Any]:
    """Speed (botocore 1.44.5, ``SigV4Auth.add_auth``): every AWS request is signed with SigV4, a
    twentieth of a storm's CPU in canonical requests and HMACs that moto never checks (it reads
    only the access key from the ``Authorization`` header, to pick the account). Requests the
    harness sends get that header with the real access key, scope and signed-header names and a
    signature of zeros. Presigned URLs (``SigV4QueryAuth``, how the EKS token is made) are still
    signed for real."""
    from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
    from botocore.utils import get_current_datetime

    original = SigV4Auth.add_auth

    def add_auth(self: Any, request: Any) -> None:
        if type(self) is not SigV4Auth or self.credentials is None:
            original(self, request)
            return
        request.context["timestamp"] = get_current_datetime().strftime(SIGV4_TIMESTAMP)
        # botocore's own header handling: drops a retry's old Authorization, sets the date
        # and the session token.
        self._modify_request_before_signing(request)
        request.headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, "
            f"SignedHeaders=host;x-amz-date, Signature={'0' * 64}"
        )

    return _started(mock.patch.object(SigV4Auth, "add_auth", add_auth))


def scan_sqs_queues_once() -> list[Any]:
    """Speed (moto 5.2.5, ``sqs.models.Queue``): moto answers "is this message visible /
    delayed" by reading the clock once per message,
    computes every attribute of a queue (three such scans) on each SendMessage, and again for
    every message ReceiveMessage considers (to read its retention period): quadratic in the
    queue's depth. A storm leaves a thousand messages in the rule's probe queue and in the
    notification probe, and those scans cost more CPU than the remediations. The same answers
    come from one clock reading per scan and the queue's retention period read directly."""
    started: list[Any] = []
    from moto.core.utils import unix_time, unix_time_millis
    from moto.sqs.models import Queue, SQSBackend

    def visible_now(queue: Any) -> list[Any]:
        now = unix_time_millis()
        return [m for m in queue._messages if now > m.visible_at and not now < m.delayed_until]

    def not_visible(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if not now > m.visible_at)

    def delayed(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if now < m.delayed_until)

    def within_retention(backend: Any, queue_name: str, message: Any) -> bool:
        retention: Any = backend.get_queue(queue_name).message_retention_period
        return bool(retention + message.sent_timestamp / 1000 > unix_time())

    for owner, name, replacement in (
        (Queue, "messages", property(visible_now)),
        (Queue, "approximate_number_of_messages", property(lambda queue: len(visible_now(queue)))),
        (Queue, "approximate_number_of_messages_not_visible", property(not_visible)),
        (Queue, "approximate_number_of_messages_delayed", property(delayed)),
        (SQSBackend, "is_message_valid_based_on_retention_period", within_retention),
    ):
        patcher = mock.patch.object(owner, name, replacement)
        patcher.start()
        started.append(patcher)
    return started


def read_one_partition_per_query() -> list[Any]:
    """Speed (moto 5.2.5, ``dynamodb.models.table.Table.query``): moto answers a Query on the
    table's own key by walking every item of the table and
    keeping those of the partition asked for. Admit reads an instance's history and sightings
    that way, so each admission cost grows with everything the storm wrote before it:
    quadratic in the storm, where DynamoDB reads the one partition. The same items come from
    the partition alone; index queries keep moto's walk (every item may carry the index key)."""
    started: list[Any] = []
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    original_all_items = Table.all_items
    signature = inspect.signature(original_query)
    partition = threading.local()

    def query(table: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = signature.bind(table, hash_key, *args, **kwargs).arguments.get("index_name")
        if index_name or not table.range_key_attr or hash_key is None:
            return original_query(table, hash_key, *args, **kwargs)
        partition.key = hash_key
        try:
            return original_query(table, hash_key, *args, **kwargs)
        finally:
            partition.key = None

    def all_items(table: Any) -> list[Any]:
        key = getattr(partition, "key", None)
        if key is None:
            items: list[Any] = original_all_items(table)
            return items
        return list(table.items.get(key, {}).values())

    for name, replacement in (("query", query), ("all_items", all_items)):
        patcher = mock.patch.object(Table, name, replacement)
        patcher.start()
        started.append(patcher)
    return started


def patch_terminal_data_limit() -> Any:
    """Correctness (written for moto 5.2.5): ``States.DataLimitExceeded`` is terminal.

    In AWS a task result, a state's input after ``Parameters`` or a state's output over 256 KiB
    fails the execution with ``States.DataLimitExceeded``, an error ``States.ALL`` does not match
    ("Error handling in Step Functions"): no Catch runs, so nothing is recorded. moto raises the
    error where AWS does (``moto.stepfunctions.parser.quotas``) but lets ``States.ALL`` match it
    like any other, so the workflow's catch-all would record a failure AWS never records. With this
    patch only a clause naming ``States.DataLimitExceeded`` itself matches it, in Retry and Catch
    alike. Returns the started patcher; ``tests/unit/sim/test_local_aws_patches.py`` fails when
    the internals it relies on change.
    """
    from moto.stepfunctions.parser import quotas
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import (
        ErrorEqualsDecl,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
        StatesErrorName,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )

    if quotas.MAX_STATE_SIZE_UTF8_BYTES != STATE_LIMIT_BYTES:
        raise RuntimeError(
            "moto's Step Functions payload quota is no longer 256 KiB "
            f"({quotas.MAX_STATE_SIZE_UTF8_BYTES}); revisit patch_terminal_data_limit"
        )
    data_limit = StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded)
    original = ErrorEqualsDecl._eval_body

    def eval_body(decl: Any, env: Any) -> None:
        # moto pushes the error's name; the declaration pops it and pushes whether it matched.
        if env.stack and env.stack[-1] == data_limit and data_limit not in decl.error_names:
            env.stack.pop()
            env.stack.append(False)
            return
        original(decl, env)

    patcher = mock.patch.object(ErrorEqualsDecl, "_eval_body", eval_body)
    patcher.start()
    return patcher


def warm_moto_routing() -> None:
    """Speed and a race (moto 5.2.5, ``get_service_model``, ``get_service_router``): load the service models,
    their operation models and the request routers of every service NodeHeal calls now, on this one
    thread.

    moto builds them on first use behind ``functools.cache``, which does not hold other threads back while it
    computes: the first Lambda invocations of a thousand executions starting at once would each load the
    Lambda service model (~50 ms apiece) instead of the first alone. The operation models are a race, not
    only a cost: moto's ``ServiceModel.operation_model`` and botocore's, which it calls, cache under the
    same key of the same instance cache, so a thread asking for an operation while another is making it
    can get botocore's model, which lacks moto's ``http_trait`` ("'OperationModel' object has no attribute
    'http_trait'", seen in a storm of simultaneous executions). Made here first, every later ask is a
    cache hit."""
    from moto.core.routing import get_service_router
    from moto.core.utils import get_service_model

    for service in MOTO_SERVICES:
        model = get_service_model(service)
        for operation in model.operation_names:
            model.operation_model(operation)
        get_service_router(service)


@functools.lru_cache(maxsize=1024)
def _parse_extended_jsonpath(path: str) -> Any:
    import jsonpath_ng.ext

    return jsonpath_ng.ext.parser.parse(path)


@functools.lru_cache(maxsize=1024)
def _parse_jsonpath(path: str) -> Any:
    import jsonpath_ng

    return jsonpath_ng.parser.parse(path)


@functools.lru_cache(maxsize=16)
def parse_tree(definition: str) -> Any:
    """moto's ANTLR parse tree of an ASL definition (syntax errors raise as in moto).

    moto's preprocessor, which builds each execution's program from the tree, reads the text of a
    subtree (``getText``) again at every level above it: half of its 50 ms per execution. The tree
    is never changed after parsing, so each node's text is read once and kept on the node."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    tree = AmazonStateLanguageParser.parse(definition)[1]
    _keep_texts(tree)
    return tree


@functools.lru_cache(maxsize=16)
def evaluation_program(definition: str) -> Any:
    """moto's evaluation program of an ASL definition, built once and shared by its executions.

    Sharing is sound in moto 5.2.5 because a program is read-only once built: every component sets
    its fields in its constructor (or ``from_state_props``, during the build), and what changes
    while an execution runs lives in that execution's ``Environment`` (its stack, heap, context
    and frames). A retrier's attempt count, for one, is kept in the environment's heap under the
    component's ``heap_key``. That key is the one thing a component makes lazily, on first read;
    two executions reading it first at once could each make one and lose each other's counts, so
    every key is made here, before the program is shared. Map and Parallel states make their
    workers per evaluation, not in the program. A test runs two executions of one program with
    retries at once and checks each counts its own attempts."""
    from moto.stepfunctions.parser.asl.component.component import Component
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    program = Preprocessor().visit(parse_tree(definition))
    seen: set[int] = set()
    pending: list[Any] = [program]
    while pending:
        value = pending.pop()
        if isinstance(value, (list, tuple, set, frozenset)):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, Component) and id(value) not in seen:
            seen.add(id(value))
            if isinstance(value, EvalComponent):
                _ = value.heap_key
            pending.extend(vars(value).values())
    return program


def _keep_texts(tree: Any) -> None:
    """Give every rule node of ``tree`` its text, computed once bottom-up (antlr4 4.13's
    ``RuleContext.getText`` concatenates its children's texts on every call)."""

    def text_of(node: Any) -> str:
        if hasattr(node, "symbol"):  # a terminal node: its token's text
            return str(node.getText())
        text = "".join(text_of(child) for child in node.getChildren())
        node.getText = functools.partial(str, text)  # an instance attribute: this node only
        return text

    text_of(tree)


#: DynamoDB operations whose answers are items and counts: plain JSON once moto turned its
#: ``DynamoType`` values into dicts (``DynamoResult``).
DYNAMODB_ITEM_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)


def write_dynamodb_items_as_json() -> list[Any]:
    """Speed (moto 5.2.5, ``DynamoResult.execute_result``): moto writes every DynamoDB answer
    through its generic response serializer, which walks the operation's output shape and looks
    each member up through attribute-alias providers: a sixth of a 1,000-node storm's CPU, most
    of it on items that are already DynamoDB JSON. For the item operations, an answer made only of
    objects, arrays, strings, numbers and booleans is written as that JSON instead, which is the
    body the serializer writes for it (the JSON protocol has nothing else to add); anything else
    (a null, bytes, a timestamp, an error) still goes through moto's serializer."""
    import json

    from moto.dynamodb.responses import DynamoResult

    original = DynamoResult.execute_result
    content_types: dict[str, str] = {}

    def execute_result(result: Any, context: Any) -> Any:
        name = context.operation_model.name
        if name not in DYNAMODB_ITEM_OPERATIONS or not _plain_json(result.result):
            return original(result, context)
        content_type = content_types.get(name)
        if content_type is None:
            status, headers, body = original(result, context)
            content_types[name] = headers.get("Content-Type", "")
            return status, headers, body
        return 200, {"Content-Type": content_type}, json.dumps(result.result)

    return _started(mock.patch.object(DynamoResult, "execute_result", execute_result))


def _plain_json(value: Any) -> bool:
    """Whether ``value`` is made of dicts with string keys, lists, strings, ints, floats and
    booleans only (no null, which the serializer would leave out)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_json(v) for v in value)
    return isinstance(value, str | int | float | bool)
