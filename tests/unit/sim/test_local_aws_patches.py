"""The moto internals ``nodeheal.sim.local_aws`` patches for correctness, checked against the
installed moto: when an upgrade moves them, these fail here rather than letting the local harness
silently stop behaving like Step Functions."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from moto.stepfunctions.parser import quotas
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField

from nodeheal.payload import STATE_LIMIT_BYTES
from nodeheal.sim.moto_patches import MOTO_VERSION, patch_terminal_data_limit

ALL = StatesErrorName(typ=StatesErrorNameType.StatesALL)
DATA_LIMIT = StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded)


class _Env:
    """The part of moto's Environment an ErrorEquals declaration reads."""

    def __init__(self, error: Any) -> None:
        self.stack: list[Any] = [error]
        self.next_field_name: str | None = None

    def is_running(self) -> bool:
        return True


def matches(error_names: list[Any], error: Any) -> bool:
    env = _Env(error)
    ErrorEqualsDecl(error_names=error_names).eval(env)  # type: ignore[arg-type]
    (result,) = env.stack
    return bool(result)


@pytest.fixture
def terminal_data_limit() -> Any:
    patcher = patch_terminal_data_limit()
    yield
    patcher.stop()


def test_defect_4_moto_still_raises_data_limit_exceeded_where_step_functions_does() -> None:
    # moto 5.2.5 checks a Lambda task's result and every state's output against 256 KiB.
    assert quotas.MAX_STATE_SIZE_UTF8_BYTES == STATE_LIMIT_BYTES
    assert not quotas.is_within_size_quota("x" * STATE_LIMIT_BYTES)
    assert quotas.is_within_size_quota("x" * (STATE_LIMIT_BYTES - 16))
    assert callable(StateTaskLambda._verify_size_quota)
    assert callable(CommonStateField._verify_size_quota)
    assert DATA_LIMIT.error_name == "States.DataLimitExceeded"


def test_defect_4_unpatched_moto_lets_states_all_catch_data_limit_exceeded() -> None:
    # The behaviour the patch corrects; if moto fixes it, the patch can go.
    assert matches([ALL], DATA_LIMIT)


def test_defect_4_states_all_does_not_match_data_limit_exceeded(terminal_data_limit: None) -> None:
    assert not matches([ALL], DATA_LIMIT)
    assert matches([DATA_LIMIT], DATA_LIMIT)  # named explicitly, it still matches
    # Everything else matches exactly as before.
    assert matches([ALL], CustomErrorName("KubernetesApiError"))
    assert matches([ALL], StatesErrorName(typ=StatesErrorNameType.StatesTaskFailed))
    assert matches([CustomErrorName("LedgerContentionError")], CustomErrorName("LedgerContentionError"))
    assert not matches([CustomErrorName("LedgerContentionError")], CustomErrorName("KubernetesApiError"))


def test_every_operation_model_moto_routes_by_is_motos_own_before_any_request() -> None:
    """moto's ServiceModel.operation_model and botocore's share one cache key: a thread asking
    while another makes the model could get botocore's, without ``http_trait``. The harness makes
    them all on one thread first, so every later ask is a hit on moto's own."""
    from moto.core.model import OperationModel
    from moto.core.utils import get_service_model

    from nodeheal.sim.moto_patches import MOTO_SERVICES, warm_moto_routing

    warm_moto_routing()
    for service in MOTO_SERVICES:
        model = get_service_model(service)
        for operation in model.operation_names:
            cached = model._instance_cache[("operation_model", (operation,))]
            assert isinstance(cached, OperationModel), (service, operation)
            assert hasattr(cached, "http_trait")


def _ledger_like_table() -> Any:
    import boto3

    client = boto3.client("dynamodb", region_name="us-west-2")
    client.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "cluster", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "byCluster",
                "KeySchema": [
                    {"AttributeName": "cluster", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for p in range(30):
        for s in range(4):
            client.put_item(
                TableName="t",
                Item={"pk": {"S": f"P#{p}"}, "sk": {"S": f"REM#{s}"}, "cluster": {"S": f"c{p % 3}"}},
            )
    return client


def _reads(client: Any) -> list[Any]:
    def query(**kwargs: Any) -> list[Any]:
        return client.query(TableName="t", **kwargs)["Items"]

    return [
        query(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "P#7"}}),
        query(
            KeyConditionExpression="pk = :p AND sk >= :s",
            ExpressionAttributeValues={":p": {"S": "P#7"}, ":s": {"S": "REM#2"}},
            ScanIndexForward=False,
            ConsistentRead=True,
        ),
        query(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "P#none"}}),
        query(
            IndexName="byCluster",
            KeyConditionExpression="#c = :c",
            ExpressionAttributeNames={"#c": "cluster"},
            ExpressionAttributeValues={":c": {"S": "c1"}},
        ),
    ]


def test_a_query_on_the_table_key_reads_its_partition_alone_with_motos_answers() -> None:
    """Admit queries an instance's history and sightings by the table's key; moto walks every
    item of the table for each, which made a storm quadratic in the harness alone."""
    from moto import mock_aws
    from moto.dynamodb.models.table import Table

    from nodeheal.sim.moto_patches import read_one_partition_per_query

    with mock_aws():
        client = _ledger_like_table()
        unpatched = _reads(client)
        patchers = read_one_partition_per_query()
        try:
            walked: list[int] = []
            partition_items = Table.all_items

            def counted(table: Any) -> Any:
                items = partition_items(table)
                walked.append(len(items))
                return items

            with mock.patch.object(Table, "all_items", counted):
                assert _reads(client) == unpatched
            # Each key query walks its own partition (4, 4, none); the index query every item.
            assert walked == [4, 4, 0, 120]
            assert len(unpatched[0]) == 4 and len(unpatched[1]) == 2 and unpatched[2] == []
            assert len(unpatched[3]) == 40
        finally:
            for patcher in patchers:
                patcher.stop()


ASL_DEFINITION = """{
  "StartAt": "Admit",
  "States": {
    "Admit": {"Type": "Task", "Resource": "arn:aws:lambda:us-west-2:123456789012:function:admit",
              "Parameters": {"event.$": "$.event", "execution.$": "$$.Execution.Name"},
              "Retry": [{"ErrorEquals": ["States.TaskFailed"], "MaxAttempts": 2}],
              "ResultPath": "$.admission", "Next": "Admitted?"},
    "Admitted?": {"Type": "Choice",
                  "Choices": [{"Variable": "$.admission.verdict", "StringEquals": "proceed", "Next": "Done"}],
                  "Default": "Wait"},
    "Wait": {"Type": "Wait", "Seconds": 30, "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}"""


def test_the_kept_parse_tree_gives_each_node_the_text_antlr_gives_and_the_same_program() -> None:
    # moto 5.2.5's preprocessor builds every execution's program from the parse tree; the tree
    # the local harness keeps per definition answers getText from what it computed once.
    import re

    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    from nodeheal.sim.moto_patches import parse_tree

    fresh = AmazonStateLanguageParser.parse(ASL_DEFINITION)[1]
    kept = parse_tree(ASL_DEFINITION)

    def texts(node: Any) -> list[str]:
        if hasattr(node, "symbol"):  # a terminal node
            return [node.getText()]
        return [node.getText(), *(text for child in node.getChildren() for text in texts(child))]

    assert texts(kept) == texts(fresh)
    assert "getText" in vars(kept) and "getText" not in vars(fresh)

    def program(tree: Any) -> str:
        return re.sub(r"0x[0-9a-f]+", "", str(Preprocessor().visit(tree)))  # object addresses differ

    assert program(kept) == program(fresh)


RETRYING_DEFINITION = """{
  "StartAt": "Read",
  "States": {
    "Read": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
             "Parameters": {"TableName": "no-such-table", "Key": {"pk": {"S": "x"}}},
             "Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 2,
                        "BackoffRate": 1.0}],
             "End": true}
  }
}"""


def test_a_shared_program_has_every_key_made_and_counts_each_executions_retries_apart() -> None:
    """Every execution of one definition evaluates one program (``evaluation_program``). Two
    executions that retry at the same time each make exactly their own attempts: one, then the two
    retries the Retrier allows, then the failure."""
    import json
    import time

    import boto3
    from moto import mock_aws
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent

    from nodeheal.sim.moto_patches import evaluation_program, parse_each_definition_once

    program = evaluation_program(RETRYING_DEFINITION)
    assert evaluation_program(RETRYING_DEFINITION) is program
    components: list[Any] = []
    pending: list[Any] = [program]
    while pending:
        value = pending.pop()
        if isinstance(value, list | tuple):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif hasattr(value, "__dict__") and type(value).__module__.startswith("moto.stepfunctions"):
            components.append(value)
            pending.extend(vars(value).values())
    evaluated = [c for c in components if isinstance(c, EvalComponent)]
    assert len(evaluated) > 10
    assert all("_EvalComponent__heap_key" in vars(c) for c in evaluated)

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        patchers = parse_each_definition_once()
        try:
            client = boto3.client("stepfunctions", region_name="us-west-2")
            machine = client.create_state_machine(
                name="retrying", definition=RETRYING_DEFINITION, roleArn="arn:aws:iam::123456789012:role/sfn"
            )["stateMachineArn"]
            executions = [
                client.start_execution(stateMachineArn=machine, name=f"run-{index}", input="{}")[
                    "executionArn"
                ]
                for index in range(2)
            ]
            deadline = time.monotonic() + 120
            while any(
                client.describe_execution(executionArn=arn)["status"] == "RUNNING" for arn in executions
            ):
                assert time.monotonic() < deadline, "the executions did not end"
                time.sleep(0.05)
            for arn in executions:
                history = client.get_execution_history(executionArn=arn)["events"]
                kinds = [event["type"] for event in history]
                assert kinds.count("TaskScheduled") == 3, json.dumps(kinds)
                assert kinds[-1] == "ExecutionFailed"
        finally:
            for patcher in patchers:
                patcher.stop()


def test_create_state_machine_validates_through_the_kept_trees_and_still_refuses_a_bad_definition() -> None:
    """The harness validates CreateStateMachine's definition through its parse cache: a definition
    parsed once is not parsed again, and one that does not parse fails as unpatched moto fails it."""
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    from nodeheal.sim.moto_patches import parse_tree, validate_definitions_through_the_cache

    role = "arn:aws:iam::123456789012:role/sfn"
    broken = ASL_DEFINITION.replace('"StartAt": "Admit"', '"StartAt": 7')

    def create(definition: str, name: str) -> str:
        client = boto3.client("stepfunctions", region_name="us-west-2")
        try:
            client.create_state_machine(name=name, definition=definition, roleArn=role)
        except ClientError as error:
            return f"{error.response['Error']['Code']}: {error.response['Error']['Message']}"
        return "created"

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        unpatched = create(broken, "broken")
    assert "ASLParserException" in unpatched and "mismatched input '7'" in unpatched

    parse_tree.cache_clear()
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        patchers = validate_definitions_through_the_cache()
        try:
            assert create(broken, "broken") == unpatched
            assert create(ASL_DEFINITION, "first") == "created"
            assert create(ASL_DEFINITION, "second") == "created"
        finally:
            for patcher in patchers:
                patcher.stop()
    assert parse_tree.cache_info().misses == 2 and parse_tree.cache_info().hits == 1


def test_the_installed_moto_is_the_release_the_patches_were_written_for() -> None:
    import moto

    assert moto.__version__ == MOTO_VERSION, (
        f"moto is {moto.__version__}; nodeheal/sim/moto_patches.py was written for {MOTO_VERSION}: "
        "check each patch against the new release's internals, then move MOTO_VERSION"
    )


def _item_answers(client: Any) -> list[Any]:
    """Every kind of item answer NodeHeal reads, with each attribute type it writes."""
    item = {
        "pk": {"S": "LOCK#c1#i-1"},
        "sk": {"S": "LOCK"},
        "cluster": {"S": "c1"},
        "version": {"N": "3"},
        "held": {"BOOL": True},
        "nothing": {"NULL": True},
        "detail": {"M": {"reasons": {"L": [{"S": "XID_79"}, {"N": "79"}]}, "nodes": {"SS": ["a", "b"]}}},
    }
    answers: list[Any] = [
        client.put_item(TableName="t", Item=item, ReturnValues="ALL_OLD"),
        client.put_item(TableName="t", Item=item, ReturnValues="ALL_OLD"),
        client.get_item(TableName="t", Key={"pk": item["pk"], "sk": item["sk"]}, ConsistentRead=True),
        client.get_item(TableName="t", Key={"pk": {"S": "none"}, "sk": {"S": "none"}}),
        client.update_item(
            TableName="t",
            Key={"pk": item["pk"], "sk": item["sk"]},
            UpdateExpression="SET version = version + :one",
            ConditionExpression="version = :three",
            ExpressionAttributeValues={":one": {"N": "1"}, ":three": {"N": "3"}},
            ReturnValues="ALL_NEW",
        ),
        client.query(
            TableName="t",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "P#3"}},
            Limit=2,
        ),
        client.query(
            TableName="t",
            IndexName="byCluster",
            KeyConditionExpression="#c = :c",
            ExpressionAttributeNames={"#c": "cluster"},
            ExpressionAttributeValues={":c": {"S": "c1"}},
            Select="COUNT",
        ),
        client.scan(TableName="t", Limit=5),
        client.delete_item(TableName="t", Key={"pk": item["pk"], "sk": item["sk"]}, ReturnValues="ALL_OLD"),
    ]
    for answer in answers:
        answer.pop("ResponseMetadata")
    return answers


def test_dynamodb_item_answers_written_as_json_parse_as_motos_serializer_writes_them() -> None:
    from botocore.exceptions import ClientError
    from moto import mock_aws

    from nodeheal.sim.moto_patches import write_dynamodb_items_as_json

    def refusal(client: Any) -> dict[str, Any]:
        try:
            client.put_item(
                TableName="t",
                Item={"pk": {"S": "P#1"}, "sk": {"S": "REM#1"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            return dict(error.response["Error"])
        raise AssertionError("the condition should have failed")

    with mock_aws():
        client = _ledger_like_table()
        expected = _item_answers(client), refusal(client)
    with mock_aws():
        patchers = write_dynamodb_items_as_json()
        try:
            client = _ledger_like_table()
            # The first answer of each operation is moto's own (it gives the content type); the
            # second round is written as JSON throughout.
            assert (_item_answers(client), refusal(client)) == expected
            assert _item_answers(client) == expected[0]
        finally:
            for patcher in patchers:
                patcher.stop()


def test_the_patches_keep_moto_from_building_its_default_images(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    from moto import mock_aws, settings

    from nodeheal.sim import moto_patches

    monkeypatch.delenv("MOTO_EC2_LOAD_DEFAULT_AMIS", raising=False)
    assert settings.ec2_load_default_amis()  # moto's default: every EC2 backend builds its images
    with mock_aws():
        patchers = moto_patches.start()
        try:
            assert not settings.ec2_load_default_amis()
            ec2 = boto3.client("ec2", region_name="us-west-2")
            assert ec2.describe_images(Owners=["amazon"])["Images"] == []
            # An instance still runs from the image the harness names.
            ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="t3.micro")
        finally:
            for patcher in patchers:
                patcher.stop()


def test_state_data_copies_equal_deepcopy_and_share_no_container() -> None:
    """moto's interpreter copies a state's data before handing it on; the JSON copy it uses in the
    harness gives what ``copy.deepcopy`` gives, and only what ``copy.deepcopy`` would share."""
    import copy
    from datetime import UTC, datetime

    from nodeheal.sim.moto_patches import copy_json_value

    value: Any = {
        "event": {"node": {"name": "gpu-1", "labels": {"a": "b"}}, "conditions": [{"status": "True"}]},
        "counts": [1, 2.5, True, None, "x"],
        "at": datetime(2026, 11, 29, tzinfo=UTC),
        "pair": ("a", ["b"]),
    }
    copied = copy_json_value(value)
    assert copied == copy.deepcopy(value)
    assert copied is not value and copied["event"] is not value["event"]
    assert copied["event"]["conditions"][0] is not value["event"]["conditions"][0]
    assert copied["pair"][1] is not value["pair"][1]  # not JSON: copy.deepcopy copied it


def test_the_state_data_patch_replaces_the_copy_each_module_makes() -> None:
    import copy

    from moto.stepfunctions.parser.asl.component.common.string import string_expression
    from moto.stepfunctions.parser.asl.component.state.exec import execute_state
    from moto.stepfunctions.parser.asl.eval import states

    from nodeheal.sim.moto_patches import copy_json_value, copy_state_data_as_json

    patchers = copy_state_data_as_json()
    try:
        for module in (states, string_expression, execute_state):
            assert module.copy.deepcopy is copy_json_value
    finally:
        for patcher in patchers:
            patcher.stop()
    assert all(module.copy is copy for module in (states, string_expression, execute_state))


def test_the_listed_response_methods_are_what_inspect_lists() -> None:
    import inspect

    from moto.core import responses
    from moto.dynamodb.responses import DynamoHandler

    from nodeheal.sim.moto_patches import list_response_methods_once

    expected = [name for name, _ in inspect.getmembers(DynamoHandler, predicate=inspect.isfunction)]
    patchers = list_response_methods_once()
    try:
        assert responses.method_names_from_class(DynamoHandler) == expected
        assert responses.method_names_from_class(DynamoHandler) is responses.method_names_from_class(
            DynamoHandler
        )
    finally:
        for patcher in patchers:
            patcher.stop()


def test_requests_carry_the_access_key_unsigned_and_presigned_urls_stay_signed() -> None:
    """moto reads only the access key from a request's Authorization header; the harness sends that
    header with a signature of zeros. A presigned URL (the EKS token's kind) is still signed."""
    import re

    import boto3
    from botocore.awsrequest import AWSRequest
    from moto import mock_aws

    from nodeheal.sim.moto_patches import sign_requests_without_signatures

    seen: list[str] = []

    def capture(request: AWSRequest, **_: Any) -> None:
        header = request.headers.get("Authorization", b"")
        seen.append(header.decode() if isinstance(header, bytes) else str(header))

    with mock_aws():
        patchers = sign_requests_without_signatures()
        try:
            session = boto3.Session(
                aws_access_key_id="AKIAHARNESSKEY", aws_secret_access_key="secret", region_name="us-west-2"
            )
            client = session.client("dynamodb")
            client.meta.events.register("before-send.dynamodb.*", capture)
            assert client.list_tables()["TableNames"] == []
            assert client.list_tables()["TableNames"] == []
            url = session.client("sts").generate_presigned_url("get_caller_identity", ExpiresIn=60)
        finally:
            for patcher in patchers:
                patcher.stop()
    assert len(seen) == 2
    assert re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=AKIAHARNESSKEY/\d{8}/us-west-2/dynamodb/aws4_request, "
        r"SignedHeaders=host;x-amz-date, Signature=0{64}",
        seen[-1],
    ), seen[-1]
    signature = re.search(r"X-Amz-Signature=([0-9a-f]{64})", url)
    assert signature is not None and signature.group(1) != "0" * 64
