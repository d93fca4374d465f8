"""The EventBridge pattern engine against the examples of the EventBridge user guide and event-ruler.

Sources (awsdocs/amazon-eventbridge-user-guide, doc_source/): "Content filtering in Amazon
EventBridge event patterns" (content-filtering-with-event-patterns.md and
eb-event-patterns-content-based-filtering.md), "Comparison operators for use in event patterns"
(the operator table: suffix, equals-ignore-case, wildcard, anything-but variants, empty values),
"Arrays in Amazon EventBridge event patterns" (eb-event-patterns-arrays.md), "Matching null values
and empty strings" (eb-event-patterns-null-values.md); and aws/event-ruler's README for ``$or``
("Normal", "Parallel", "Or has an And inside", "Nested Or and And") and wildcard escaping.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeheal.patterns import InvalidPatternError, match, validate_pattern

EC2_STATE = {
    "detail-type": ["EC2 Instance State-change Notification"],
    "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-02ebd4584a2ebd341"],
    "detail": {"state": ["initializing", "running"]},
}

# (name, pattern, events that match, events that do not)
DOCUMENTED: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    (
        "prefix on time",
        {"time": [{"prefix": "2017-10-02"}]},
        [{"time": "2017-10-02T18:43:48Z"}],
        [{"time": "2017-10-03T00:00:00Z"}, {"time": 20171002}, {}],
    ),
    (
        "prefix: autoscaling events from European regions",
        {"source": ["aws.autoscaling"], "region": [{"prefix": "eu-"}]},
        [{"source": "aws.autoscaling", "region": "eu-west-1"}],
        [{"source": "aws.autoscaling", "region": "us-east-1"}, {"source": "aws.ec2", "region": "eu-west-1"}],
    ),
    (
        "anything-but a string",
        {"detail": {"state": [{"anything-but": "initializing"}]}},
        [{"detail": {"state": "running"}}, {"detail": {"state": 3}}],
        [{"detail": {"state": "initializing"}}, {"detail": {}}],
    ),
    (
        "anything-but a number",
        {"detail": {"x-limit": [{"anything-but": 123}]}},
        [{"detail": {"x-limit": 124}}, {"detail": {"x-limit": "123"}}],
        [{"detail": {"x-limit": 123}}, {"detail": {"x-limit": 123.0}}],
    ),
    (
        "anything-but a list of strings",
        {"detail": {"state": [{"anything-but": ["stopped", "overloaded"]}]}},
        [{"detail": {"state": "running"}}],
        [{"detail": {"state": "stopped"}}, {"detail": {"state": "overloaded"}}],
    ),
    (
        "anything-but a list of numbers",
        {"detail": {"x-limit": [{"anything-but": [100, 200, 300]}]}},
        [{"detail": {"x-limit": 150}}],
        [{"detail": {"x-limit": 200}}],
    ),
    (
        "anything-but prefix",
        {"detail": {"state": [{"anything-but": {"prefix": "init"}}]}},
        [{"detail": {"state": "running"}}],
        [{"detail": {"state": "initializing"}}],
    ),
    (
        "every event but CloudTrail API calls",
        {"detail-type": [{"anything-but": "AWS API Call via CloudTrail"}]},
        [{"detail-type": "EC2 Instance State-change Notification"}],
        [{"detail-type": "AWS API Call via CloudTrail"}],
    ),
    (
        "every source but EC2 and S3",
        {"source": [{"anything-but": ["aws.ec2", "aws.s3"]}]},
        [{"source": "aws.lambda"}, {"source": "nodeheal.exporter"}],
        [{"source": "aws.ec2"}, {"source": "aws.s3"}],
    ),
    (
        "only your own events: source not starting with aws.",
        {"source": [{"anything-but": {"prefix": "aws."}}]},
        [{"source": "nodeheal.exporter"}],
        [{"source": "aws.ec2"}],
    ),
    (
        "anything-but suffix: FileName does not end with .png",
        {"FileName": [{"anything-but": {"suffix": ".png"}}]},
        [{"FileName": "image.jpg"}],
        [{"FileName": "image.png"}],
    ),
    (
        "anything-but equals-ignore-case",
        {"state": [{"anything-but": {"equals-ignore-case": "initializing"}}]},
        [{"state": "running"}],
        [{"state": "INITIALIZING"}, {"state": "Initializing"}],
    ),
    (
        "anything-but wildcard: not a path with /lib/",
        {"FilePath": [{"anything-but": {"wildcard": "*/lib/*"}}]},
        [{"FilePath": "/usr/bin/python"}],
        [{"FilePath": "/usr/lib/python3"}],
    ),
    (
        "numeric: every comparison must hold",
        {
            "detail": {
                "c-count": [{"numeric": [">", 0, "<=", 5]}],
                "d-count": [{"numeric": ["<", 10]}],
                "x-limit": [{"numeric": ["=", 3.018e2]}],
            }
        },
        [{"detail": {"c-count": 5, "d-count": 9.99, "x-limit": 301.8}}],
        [
            {"detail": {"c-count": 0, "d-count": 1, "x-limit": 301.8}},
            {"detail": {"c-count": 3, "d-count": 10, "x-limit": 301.8}},
            {"detail": {"c-count": 3, "d-count": 1, "x-limit": 301.9}},
            {"detail": {"c-count": "3", "d-count": 1, "x-limit": 301.8}},
        ],
    ),
    (
        "IP address matching",
        {"detail": {"source-ip": [{"cidr": "10.0.0.0/24"}]}},
        [{"detail": {"source-ip": "10.0.0.255"}}],
        [{"detail": {"source-ip": "10.0.1.0"}}, {"detail": {"source-ip": "not-an-ip"}}],
    ),
    (
        "IPv6 address matching",
        {"detail": {"source-ip": [{"cidr": "2001:db8::/32"}]}},
        [{"detail": {"source-ip": "2001:db8::1"}}],
        [{"detail": {"source-ip": "2001:db9::1"}}, {"detail": {"source-ip": "10.0.0.1"}}],
    ),
    (
        "exists false: both documented events match, c-count as an object is not a leaf",
        {"detail": {"c-count": [{"exists": False}]}},
        [EC2_STATE, {**EC2_STATE, "detail": {"state": ["initializing", "running"], "c-count": {"c1": 100}}}],
        [{"detail": {"c-count": 3}}, {"detail": {"c-count": None}}],
    ),
    (
        "exists true: events with a description",
        {"detail": {"description": [{"exists": True}]}},
        [{"detail": {"description": "full text"}}, {"detail": {"description": ""}}],
        [{"detail": {}}, {"detail": {"description": {"nested": 1}}}],
    ),
    (
        "complex example with multiple matching",
        {
            "time": [{"prefix": "2017-10-02"}],
            "detail": {
                "state": [{"anything-but": "initializing"}],
                "c-count": [{"numeric": [">", 0, "<=", 5]}],
                "d-count": [{"numeric": ["<", 10]}],
                "x-limit": [{"anything-but": [100, 200, 300]}],
            },
        },
        [
            {
                "time": "2017-10-02T18:43:48Z",
                "detail": {"state": "running", "c-count": 1, "d-count": 2, "x-limit": 150},
            }
        ],
        [
            {
                "time": "2017-10-02T18:43:48Z",
                "detail": {"state": "running", "c-count": 1, "d-count": 2, "x-limit": 300},
            }
        ],
    ),
    (
        "empty string",
        {"detail": {"eventVersion": [""]}},
        [{"detail": {"eventVersion": "", "responseElements": None}}],
        [{"detail": {"eventVersion": None}}, {"detail": {}}],
    ),
    (
        "null value, not interchangeable with the empty string",
        {"detail": {"responseElements": [None]}},
        [{"detail": {"eventVersion": "", "responseElements": None}}],
        [{"detail": {"responseElements": ""}}, {"detail": {}}],
    ),
    (
        "arrays: the intersection of the pattern and the event arrays is not empty",
        {
            "resources": [
                "arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f",
                "arn:aws:ec2:us-east-1:111122223333:instance/i-b188560f",
                "arn:aws:ec2:us-east-1:444455556666:instance/i-b188560f",
            ]
        },
        [
            {
                "resources": [
                    "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:eb56d16b-bbf0-401d-b893-"
                    "d5978ed4a025:autoScalingGroupName/ASGTerminate",
                    "arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f",
                ]
            }
        ],
        [{"resources": ["arn:aws:ec2:us-east-1:999999999999:instance/i-b188560f"]}, {"resources": []}],
    ),
    (
        "suffix",
        {"FileName": [{"suffix": ".png"}]},
        [{"FileName": "image.png"}],
        [{"FileName": "image.PNG"}, {"FileName": "png.jpg"}],
    ),
    (
        "equals-ignore-case",
        {"Name": [{"equals-ignore-case": "alice"}]},
        [{"Name": "Alice"}, {"Name": "ALICE"}],
        [{"Name": "Alicia"}],
    ),
    (
        "prefix ignoring case",
        {"service": [{"prefix": {"equals-ignore-case": "eventb"}}]},
        [{"service": "EventBridge"}, {"service": "EVENTBRIDGE"}],
        [{"service": "SNS"}],
    ),
    (
        "suffix ignoring case",
        {"service": [{"suffix": {"equals-ignore-case": "tbridge"}}]},
        [{"service": "EventBridge"}, {"service": "EVENTBRIDGE"}],
        [{"service": "EventBus"}],
    ),
    (
        "wildcard (event-ruler README)",
        {"source": [{"wildcard": "Simple*Service"}]},
        [{"source": "SimpleQueueService"}, {"source": "SimpleService"}],
        [{"source": "SimpleQueueServices"}, {"source": "simpleQueueService"}],
    ),
    (
        "wildcard crosses slashes; escaped star and backslash are literal",
        {"path": [{"wildcard": "dir/*.png"}], "name": [{"wildcard": "a\\*b\\\\c"}]},
        [{"path": "dir/dir/dir/image.png", "name": "a*b\\c"}],
        [{"path": "dir/image.jpg", "name": "a*b\\c"}, {"path": "dir/x.png", "name": "axb\\c"}],
    ),
    (
        "$or: source and (metricName or namespace)",
        {
            "source": ["aws.cloudwatch"],
            "$or": [{"metricName": ["CPUUtilization", "ReadLatency"]}, {"namespace": ["AWS/EC2", "AWS/ES"]}],
        },
        [
            {"source": "aws.cloudwatch", "metricName": "ReadLatency"},
            {"source": "aws.cloudwatch", "namespace": "AWS/ES"},
        ],
        [
            {"source": "aws.cloudwatch", "metricName": "Other", "namespace": "AWS/S3"},
            {"source": "aws.ec2", "metricName": "CPUUtilization"},
        ],
    ),
    (
        "parallel $or at two levels",
        {
            "$or": [{"metricName": ["CPUUtilization", "ReadLatency"]}, {"namespace": ["AWS/EC2", "AWS/ES"]}],
            "detail": {
                "$or": [{"source": ["aws.cloudwatch"]}, {"detail-type": ["CloudWatch Alarm State Change"]}]
            },
        },
        [{"namespace": "AWS/EC2", "detail": {"detail-type": "CloudWatch Alarm State Change"}}],
        [{"namespace": "AWS/EC2", "detail": {"source": "aws.ec2"}}],
    ),
    (
        "$or with an and inside, nested $or",
        {
            "source": ["aws.cloudwatch"],
            "$or": [
                {"metricName": ["CPUUtilization", "ReadLatency"]},
                {
                    "metricType": ["MetricType"],
                    "namespace": ["AWS/EC2", "AWS/ES"],
                    "$or": [{"metricId": [1234]}, {"spaceId": [1000]}],
                },
                {"scope": ["Service"]},
            ],
        },
        [
            {"source": "aws.cloudwatch", "metricType": "MetricType", "namespace": "AWS/EC2", "spaceId": 1000},
            {"source": "aws.cloudwatch", "scope": "Service"},
        ],
        [
            {"source": "aws.cloudwatch", "metricType": "MetricType", "namespace": "AWS/EC2", "spaceId": 1001},
            {"source": "aws.cloudwatch", "metricType": "MetricType", "metricId": 1234},
        ],
    ),
]


@pytest.mark.parametrize(("name", "pattern", "matching", "other"), DOCUMENTED, ids=[d[0] for d in DOCUMENTED])
def test_documented_examples(
    name: str, pattern: dict[str, Any], matching: list[Any], other: list[Any]
) -> None:
    for event in matching:
        result = match(pattern, event)
        assert result.matched, (event, result.reasons)
        assert result.reasons == ()
    for event in other:
        result = match(pattern, event)
        assert not result.matched, event
        assert result.reasons, "a refusal always says why"


def test_array_of_objects_must_match_within_one_element() -> None:
    pattern = {"Employee": {"Name": ["Anne"], "Age": [40]}}
    employees = [{"Name": "Anne", "Age": 30}, {"Name": "Bob", "Age": 40}]
    assert not match(pattern, {"Employee": employees}).matched
    assert match(pattern, {"Employee": [*employees, {"Name": "Anne", "Age": 40}]}).matched


def test_numbers_compare_numerically_and_never_as_strings_or_booleans() -> None:
    assert match({"n": [300]}, {"n": 3.0e2}).matched
    assert not match({"n": [1]}, {"n": True}).matched
    assert not match({"n": ["1"]}, {"n": 1}).matched
    assert not match({"b": [True]}, {"b": "true"}).matched


def test_exact_numbers_beyond_float_precision_stay_distinct() -> None:
    # 2**53 + 1 has no float of its own; comparing through float() would call these two equal.
    assert match({"n": [2**53 + 1]}, {"n": 2**53 + 1}).matched
    assert not match({"n": [2**53 + 1]}, {"n": 2**53}).matched
    assert not match({"n": [2**53 + 1]}, {"n": float(2**53)}).matched


def test_numeric_comparisons_ignore_event_numbers_outside_the_documented_range() -> None:
    assert match({"n": [{"numeric": ["<", 0]}]}, {"n": -5.0e9}).matched
    assert not match({"n": [{"numeric": ["<", 0]}]}, {"n": -5.0e9 - 1}).matched
    assert match({"n": [{"anything-but": [1, 2]}]}, {"n": 6.0e9}).matched


def test_or_branch_overrides_a_field_named_before_it_and_yields_to_one_named_after() -> None:
    before = {"name": ["a"], "$or": [{"name": ["b"]}, {"other": ["x"]}]}
    assert match(before, {"name": "b"}).matched
    assert match(before, {"name": "a", "other": "x"}).matched
    assert not match(before, {"name": "a"}).matched
    after = {"$or": [{"name": ["b"]}, {"other": ["x"]}], "name": ["a"]}
    assert not match(after, {"name": "b"}).matched
    assert match(after, {"name": "a"}).matched
    assert match(after, {"name": "a", "other": "x"}).matched


def test_or_branch_folded_with_a_sibling_object_keeps_array_consistency() -> None:
    pattern = {"d": {"a": ["1"]}, "$or": [{"d": {"b": ["2"]}}, {"c": ["3"]}]}
    assert not match(pattern, {"d": [{"a": "1"}, {"b": "2"}]}).matched
    assert match(pattern, {"d": [{"a": "1"}, {"a": "1", "b": "2"}]}).matched
    assert match(pattern, {"d": [{"a": "1"}], "c": "3"}).matched


def test_two_ors_over_one_object_must_both_hold() -> None:
    pattern = {
        "d": {"$or": [{"a": ["1"]}, {"b": ["2"]}]},
        "$or": [{"d": {"$or": [{"c": ["3"]}, {"e": ["4"]}]}}, {"f": ["5"]}],
    }
    assert match(pattern, {"d": {"a": "1", "e": "4"}}).matched
    assert not match(pattern, {"d": {"a": "1"}}).matched
    assert not match(pattern, {"d": {"e": "4"}}).matched
    assert match(pattern, {"d": {"b": "2"}, "f": "5"}).matched


def test_a_folded_or_explains_each_alternative_with_the_fields_it_took_in() -> None:
    result = match({"name": ["a"], "$or": [{"name": ["b"]}, {"other": ["x"]}]}, {"name": "c"})
    assert result.reasons == (
        '$or: none of the 2 alternatives matches: [1] name: is "c"; expected "b" | '
        '[2] name: is "c"; expected "a"; other: is missing; expected "x"',
    )


def test_explanations_name_the_field_the_value_and_the_expectation() -> None:
    pattern = {"detail": {"condition": {"type": ["GPUProblem"], "status": ["True"]}, "cluster": ["a"]}}
    result = match(pattern, {"detail": {"condition": {"type": "GPUProblem", "status": "False"}}})
    assert result.reasons == (
        'detail.condition.status: is "False"; expected "True"',
        'detail.cluster: is missing; expected "a"',
    )
    numeric = match({"x": [{"numeric": [">", 0, "<=", 5]}]}, {"x": 9})
    assert numeric.reasons == ("x: is 9; expected a number > 0 and <= 5",)
    absent = match({"x": [{"exists": False}]}, {"x": 1})
    assert absent.reasons == ("x: is 1; expected the field to be absent",)
    ored = match({"$or": [{"a": ["1"]}, {"b": ["2"]}]}, {"a": "0"})
    assert ored.reasons == (
        '$or: none of the 2 alternatives matches: [1] a: is "0"; expected "1" | [2] b: is missing; expected "2"',
    )


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ([], "is a JSON object"),
        ({}, "is empty"),
        ({"a": "x"}, "a: must be an object or an array"),
        ({"a": []}, "a: empty arrays are not allowed"),
        ({"a": {}}, "a: a nested pattern is an empty object"),
        ({"a": [{"prefix": 1}]}, "prefix takes a string"),
        ({"a": [{"prefix": "x", "suffix": "y"}]}, "exactly one key"),
        ({"a": [{"regex": "x"}]}, "unknown operator 'regex'"),
        ({"a": [{"numeric": [">"]}]}, "numeric takes"),
        ({"a": [{"numeric": ["<", 5, ">", 1]}]}, "a numeric range is"),
        ({"a": [{"numeric": [">", 5, "<", 1]}]}, "bottom must be below"),
        ({"a": [{"numeric": ["~", 5]}]}, "numeric operator '~'"),
        ({"a": [{"numeric": [">", 6e9]}]}, "outside EventBridge's numeric range"),
        ({"a": [{"exists": "yes"}]}, "exists takes true or false"),
        ({"a": [{"anything-but": ["x", 1]}]}, "only strings or only numbers"),
        ({"a": [{"anything-but": {"numeric": [">", 1]}}]}, "anything-but takes"),
        ({"a": [{"anything-but": None}]}, "anything-but takes a string, a number or a list, not null"),
        ({"a": [{"anything-but": True}]}, "anything-but takes a string, a number or a list, not true"),
        ({"a": [{"anything-but": {"prefix": ""}}]}, "anything-but.prefix cannot be empty"),
        ({"a": [{"anything-but": {"suffix": ["x", ""]}}]}, "anything-but.suffix cannot be empty"),
        ({"a": [{"anything-but": [1, 6e9]}]}, "outside EventBridge's numeric range"),
        ({"a": [float("nan")]}, "is not a JSON number"),
        (
            {"a": {"$or": [{"x": [str(i)]} for i in range(11)]}, "$or": [{"y": [str(i)]} for i in range(91)]},
            "expands to 1001 combinations",
        ),
        ({"a": [{"wildcard": "a**b"}]}, "consecutive *"),
        ({"a": [{"wildcard": "a\\b"}]}, "escapes something other than"),
        ({"a": [{"cidr": "10.0.0.0/33"}]}, "is not a CIDR block"),
        ({"$or": [{"a": ["x"]}]}, "$or takes a list of at least two"),
        ({"$or": [{"a": ["x"]}, {}]}, "an $or branch is an empty object"),
    ],
)
def test_malformed_patterns_are_refused_with_the_path(pattern: Any, message: str) -> None:
    with pytest.raises(
        InvalidPatternError, match=message.replace("$", r"\$").replace("*", r"\*").replace("(", r"\(")
    ):
        validate_pattern(pattern)
