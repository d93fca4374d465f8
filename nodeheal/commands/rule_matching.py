"""``nodeheal test-pattern EVENT...``: which rule matches each event, and why the others do not.

The patterns come from the synthesized template (``--template``, or synthesized in-process from
``--config``, by default ``./cdk.json``, as every command that reads a configuration; stderr says
which), so what is tested is what CloudFormation deploys; or from the
rules deployed on the bus (``--deployed``), which EventBridge itself evaluates through
``TestEventPattern``, with the local engine adding the explanation.

An EVENT is a file (or ``-``) with a full EventBridge event, a contract ``detail`` (wrapped in
an envelope with NodeHeal's source and detail-type), or a JSON array of either.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeheal.commands.aws_access import (
    BUS_OUTPUT,
    AwsCallError,
    add_aws_arguments,
    aws_errors,
    session,
    stack_output,
)
from nodeheal.commands.output import print_json, print_table
from nodeheal.deploy_config import FILE_CONTEXT_PATH, NodeHealConfig, config_source
from nodeheal.errors import ConfigurationError, InvalidEventError
from nodeheal.events import DEFAULT_SOURCE, DETAIL_TYPE_CONDITION_CHANGED
from nodeheal.patterns import match, validate_pattern
from nodeheal.timestamps import format_timestamp, utc_now

#: Envelope fields TestEventPattern requires; filled in when an event leaves them out.
_PLACEHOLDER_ENVELOPE = {
    "version": "0",
    "id": "00000000-0000-0000-0000-000000000000",
    "account": "123456789012",
    "region": "us-east-1",
    "resources": [],
}
EXIT_EXPECTATION_FAILED = 1


@dataclass(frozen=True, slots=True)
class RulePattern:
    name: str
    pattern: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class LabelledEvent:
    label: str
    event: Mapping[str, Any]
    #: True when a bare contract detail was wrapped in an envelope.
    wrapped: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    event: str
    rule: str
    matched: bool
    reasons: tuple[str, ...] = ()
    #: TestEventPattern's answer with --deployed; None when only the local engine ran.
    eventbridge: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "event": self.event,
            "rule": self.rule,
            "matched": self.matched,
            "reasons": list(self.reasons),
        }
        if self.eventbridge is not None:
            document["eventbridge"] = self.eventbridge
        if self.notes:
            document["notes"] = list(self.notes)
        return document


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "test-pattern",
        help="test events against the EventBridge rule patterns and explain mismatches",
        description=(
            "Evaluate events against NodeHeal's EventBridge rules: the patterns of the synthesized "
            "template (--template, or synthesized in-process from --config), or the rules deployed on "
            "the bus (--deployed, evaluated by EventBridge's TestEventPattern). Prints which rule matches "
            "each event and, for each rule that does not, the fields that refused and why."
        ),
    )
    parser.add_argument(
        "events",
        metavar="EVENT",
        nargs="+",
        help="file with an EventBridge event, a contract detail, or a JSON array of them; - for stdin",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--template", metavar="PATH", help="synthesized template (cdk.out/NodeHeal.template.json)"
    )
    source.add_argument(
        "--deployed", action="store_true", help="use the rules deployed on the bus (events:TestEventPattern)"
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help=(
            "cdk.json to synthesize from without --template or --deployed (default: ./cdk.json; "
            "stderr says which)"
        ),
    )
    parser.add_argument(
        "--rule", action="append", default=[], help="only this rule (name or logical id); repeatable"
    )
    parser.add_argument(
        "--source",
        help="Source for wrapped contract details (default: the rule's source prefix + the detail's "
        f"cluster, else {DEFAULT_SOURCE}.<cluster>)",
    )
    parser.add_argument("--bus", help=f"event bus with --deployed (default: the stack's {BUS_OUTPUT} output)")
    parser.add_argument(
        "--expect",
        choices=["match", "no-match"],
        help="exit 1 unless every event matches some rule (match) or none does (no-match)",
    )
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    add_aws_arguments(parser, table=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    events_source = args.source
    if args.deployed:
        boto_session = session(args)
        bus = args.bus or stack_output(boto_session, args.stack, BUS_OUTPUT)
        client = events_client(boto_session)
        rules = _select(deployed_rules(client, bus), args.rule)
        events = list(read_events(args.events, source=events_source or _rule_source(rules)))
        verdicts = evaluate_deployed(client, rules, events)
    else:
        template = _load_template(args.template) if args.template else _configured_template(args.config)
        rules = _select(template_rules(template), args.rule)
        events = list(read_events(args.events, source=events_source or _rule_source(rules)))
        verdicts = evaluate(rules, events)
    if args.json:
        print_json([verdict.to_json() for verdict in verdicts])
    else:
        _print_verdicts(verdicts, events)
    return _exit_code(args.expect, verdicts, events)


def events_client(boto_session: Any) -> Any:
    return boto_session.client("events")


# -- patterns --------------------------------------------------------------------------------------


def template_rules(template: Mapping[str, Any]) -> list[RulePattern]:
    """Every EventBridge rule with an event pattern in a CloudFormation template."""
    rules = []
    for logical, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") != "AWS::Events::Rule":
            continue
        properties = resource.get("Properties") or {}
        pattern = properties.get("EventPattern")
        if pattern is None:
            continue  # a scheduled rule
        sources = pattern.get("source") if isinstance(pattern, dict) else None
        if isinstance(sources, list) and sources and all(str(s).startswith("aws.") for s in sources):
            continue  # AWS service events (the finalizer's rule), not NodeHeal's event contract
        if _has_intrinsic(pattern):
            raise ConfigurationError(
                f"rule {logical}'s pattern uses CloudFormation functions; "
                "test the deployed rule with --deployed"
            )
        validate_pattern(pattern)
        rules.append(RulePattern(name=str(properties.get("Name") or logical), pattern=pattern))
    if not rules:
        raise ConfigurationError("the template has no EventBridge rule with an event pattern")
    return rules


def _has_intrinsic(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(key == "Ref" or key.startswith("Fn::") or _has_intrinsic(v) for key, v in value.items())
    if isinstance(value, list):
        return any(_has_intrinsic(item) for item in value)
    return False


def _load_template(path: str) -> Mapping[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or "Resources" not in document:
        raise ConfigurationError(f"{path} is not a CloudFormation template (no Resources)")
    return document


def _configured_template(path: str | None) -> Mapping[str, Any]:
    """The template of ``--config``, else of ``./cdk.json``; validated first, every problem at once."""
    source = config_source(path)
    if source.context is None:
        # The rule matches the configured clusters: the built-in defaults name none.
        raise ConfigurationError(
            f"no configuration to synthesize the rules from: {source.description}; "
            "pass --config, --template or --deployed"
        )
    print(f"settings: {source.description}", file=sys.stderr)
    NodeHealConfig.from_cdk_context(source.context, FILE_CONTEXT_PATH)
    return synthesize_template(source.context, source.description)


def synthesize_template(nodeheal: Mapping[str, Any], config_path: str) -> Mapping[str, Any]:
    """The template NodeHeal's stack synthesizes to from a cdk.json's ``context.nodeheal``,
    in-process (no network, no Docker).

    The stack (``stacks/``) is the checkout's, the one this package runs from, wherever the
    cdk.json is: as for ``demo --config``, the file holds settings, not code.
    """
    from nodeheal.commands.demo import make_sources_importable
    from nodeheal.sim.stack.synthesized_app import SynthesizedApp, quiet_jsii

    quiet_jsii()
    try:
        make_sources_importable()
        import stacks.nodeheal_stack  # noqa: F401
    except (ConfigurationError, ImportError) as exc:
        raise ConfigurationError(
            f"synthesizing {config_path} needs NodeHeal's source checkout and aws-cdk-lib ({exc}); "
            "pass --template cdk.out/NodeHeal.template.json instead"
        ) from None
    return SynthesizedApp.synthesize(nodeheal).template


def deployed_rules(events_client: Any, bus: str) -> list[RulePattern]:
    rules = []
    with aws_errors(f"list the rules of event bus {bus}"):
        for page in events_client.get_paginator("list_rules").paginate(EventBusName=bus):
            for rule in page.get("Rules", []):
                if rule.get("EventPattern"):
                    rules.append(
                        RulePattern(name=str(rule["Name"]), pattern=json.loads(rule["EventPattern"]))
                    )
    if not rules:
        raise ConfigurationError(f"event bus {bus} has no rule with an event pattern")
    return rules


def _select(rules: Sequence[RulePattern], wanted: Sequence[str]) -> list[RulePattern]:
    if not wanted:
        return list(rules)
    chosen = [rule for rule in rules if rule.name in wanted]
    missing = sorted(set(wanted) - {rule.name for rule in chosen})
    if missing:
        raise ConfigurationError(
            f"no rule named {', '.join(missing)}; rules: {', '.join(rule.name for rule in rules)}"
        )
    return chosen


def _rule_source(rules: Sequence[RulePattern]) -> str:
    """The source a wrapped detail gets: a cluster exporter's (``<prefix>.``, completed with the
    detail's cluster) when the first rule matches a source prefix, else the one exact source a rule
    insists on."""
    for rule in rules:
        sources = rule.pattern.get("source")
        if not isinstance(sources, list):
            continue
        for entry in sources:
            if isinstance(entry, dict) and isinstance(entry.get("prefix"), str):
                return str(entry["prefix"])
        if len(sources) == 1 and isinstance(sources[0], str):
            return sources[0]
    return DEFAULT_SOURCE + "."


# -- events ----------------------------------------------------------------------------------------


def read_events(paths: Iterable[str], *, source: str) -> Iterable[LabelledEvent]:
    for path in paths:
        document = _read_json(path)
        items = document if isinstance(document, list) else [document]
        for index, item in enumerate(items):
            label = path if not isinstance(document, list) else f"{path}[{index}]"
            yield _as_event(item, label, source)


def _as_event(item: Any, label: str, source: str) -> LabelledEvent:
    if not isinstance(item, dict):
        raise InvalidEventError(f"{label}: an event is a JSON object, got {type(item).__name__}")
    if "detail-type" in item or "source" in item:
        return LabelledEvent(label, item)
    if "schemaVersion" in item or "condition" in item:
        envelope = {
            **_PLACEHOLDER_ENVELOPE,
            "detail-type": DETAIL_TYPE_CONDITION_CHANGED,
            # A prefix ("nodeheal.exporter.") becomes the detail's cluster exporter's own source.
            "source": source + str(item.get("cluster", "")) if source.endswith(".") else source,
            "time": format_timestamp(utc_now()),
            "detail": item,
        }
        return LabelledEvent(label, envelope, wrapped=True)
    raise InvalidEventError(
        f"{label}: neither an EventBridge event (source, detail-type, detail) nor a contract detail"
    )


def _read_json(path: str) -> Any:
    if path == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        try:
            text, where = Path(path).read_text(encoding="utf-8"), path
        except OSError as exc:
            raise InvalidEventError(f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise InvalidEventError(f"{path} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidEventError(f"{where} is not valid JSON: {exc}") from None


# -- evaluation ------------------------------------------------------------------------------------


def evaluate(rules: Sequence[RulePattern], events: Sequence[LabelledEvent]) -> list[Verdict]:
    verdicts = []
    for event in events:
        for rule in rules:
            result = match(rule.pattern, event.event)
            verdicts.append(
                Verdict(event.label, rule.name, result.matched, result.reasons, notes=_notes(event))
            )
    return verdicts


def evaluate_deployed(
    events_client: Any, rules: Sequence[RulePattern], events: Sequence[LabelledEvent]
) -> list[Verdict]:
    verdicts = []
    for event in events:
        envelope = {**_PLACEHOLDER_ENVELOPE, "time": format_timestamp(utc_now()), **event.event}
        for rule in rules:
            with aws_errors(f"TestEventPattern for rule {rule.name}"):
                response = events_client.test_event_pattern(
                    EventPattern=json.dumps(rule.pattern), Event=json.dumps(envelope)
                )
            answer = response.get("Result")
            if not isinstance(answer, bool):
                raise AwsCallError(f"TestEventPattern for rule {rule.name} answered without a result")
            local = match(rule.pattern, envelope)
            notes = list(_notes(event))
            if local.matched != answer:
                notes.append(
                    f"EventBridge says {'match' if answer else 'no match'}, the local engine disagrees; "
                    "EventBridge is authoritative"
                )
            verdicts.append(
                Verdict(
                    event.label,
                    rule.name,
                    answer,
                    () if answer else local.reasons,
                    eventbridge=answer,
                    notes=tuple(notes),
                )
            )
    return verdicts


def _notes(event: LabelledEvent) -> tuple[str, ...]:
    if event.wrapped:
        return (f"contract detail wrapped with source {event.event['source']!r}",)
    return ()


def _print_verdicts(verdicts: Sequence[Verdict], events: Sequence[LabelledEvent]) -> None:
    rows = [
        {
            "event": verdict.event,
            "rule": verdict.rule,
            "result": "MATCH" if verdict.matched else "no match",
            "why": "; ".join(verdict.reasons) if verdict.reasons else "",
        }
        for verdict in verdicts
    ]
    print_table(rows, [("event", "EVENT"), ("rule", "RULE"), ("result", "RESULT"), ("why", "WHY NOT")])
    notes = sorted({note for verdict in verdicts for note in verdict.notes})
    for note in notes:
        print(f"note: {note}")
    matched = {verdict.event for verdict in verdicts if verdict.matched}
    print(f"{len(matched)} of {len(events)} event(s) match at least one rule")


def _exit_code(expect: str | None, verdicts: Sequence[Verdict], events: Sequence[LabelledEvent]) -> int:
    if expect is None:
        return 0
    matched = {verdict.event for verdict in verdicts if verdict.matched}
    if expect == "match":
        return 0 if len(matched) == len(events) else EXIT_EXPECTATION_FAILED
    return 0 if not matched else EXIT_EXPECTATION_FAILED
