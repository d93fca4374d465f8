"""Every command that reads a configuration reads the same one by default, and says which.

``--config`` when given; else ``./cdk.json`` when it holds ``context.nodeheal`` (where ``cdk synth``
reads it); else NodeHeal's built-in defaults. ``explain EVENT`` once used the built-in defaults
(then ``mode: full``) while ``test-pattern`` read ``./cdk.json``, so the two disagreed about the same
checkout without a word. And the built-in mode is ``dry-run``: a configuration without ``mode``
(the README's own-app example, a hand-written cdk.json) never remediates unasked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.cli import main
from nodeheal.config import RemediationSettings
from nodeheal.contracts import config_schema
from nodeheal.deploy_config import NodeHealConfig, config_source

ROOT = Path(__file__).resolve().parents[2]
XID_79_EVENT = ROOT / "examples" / "events" / "xid79-fallen-off-the-bus.json"


def write_cdk_json(directory: Path, nodeheal: dict[str, Any] | None) -> Path:
    context = {} if nodeheal is None else {"nodeheal": nodeheal}
    path = directory / "cdk.json"
    path.write_text(json.dumps({"app": "python3 app.py", "context": context}))
    return path


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Any], str]:
    assert main(["explain", *args, "--json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


# -- the built-in mode ---------------------------------------------------------------------------


def test_without_mode_the_parser_gives_dry_run() -> None:
    assert RemediationSettings().mode is Mode.DRY_RUN
    assert NodeHealConfig.from_cdk_context({"clusters": ["c"]}).remediation.mode is Mode.DRY_RUN
    assert RemediationSettings.from_json({}).mode is Mode.DRY_RUN
    assert NodeHealConfig.from_cdk_context({"clusters": ["c"], "mode": "full"}).remediation.mode is Mode.FULL


def test_the_schema_and_the_readme_give_the_parsers_default() -> None:
    schema = config_schema.document()
    assert (
        schema["properties"]["context"]["properties"]["nodeheal"]["properties"]["mode"]["default"]
        == "dry-run"
    )
    (row,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `mode` |")]
    assert row.rstrip(" |").endswith("`dry-run` when the key is absent"), row


# -- which configuration -------------------------------------------------------------------------


def test_explain_reads_the_working_directorys_cdk_json_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_cdk_json(tmp_path, {"clusters": ["c"], "mode": "cordon-only"})
    monkeypatch.chdir(tmp_path)
    out, err = explain(capsys, str(XID_79_EVENT))
    assert (out["mode"], out["action"], out["plannedAction"]) == ("cordon-only", "cordon", "replace")
    assert err == f"settings: {config.resolve()}\n"


def test_explain_without_a_cdk_json_uses_the_built_in_defaults_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    out, err = explain(capsys, str(XID_79_EVENT))
    assert (out["mode"], out["action"], out["plannedAction"]) == ("dry-run", "none", "replace")
    assert err == f"settings: NodeHeal's built-in defaults (no cdk.json in {tmp_path.resolve()})\n"


def test_a_cdk_json_of_another_app_is_not_nodeheals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's own-app cdk.json names the app, and the construct's config is in its code."""
    config = write_cdk_json(tmp_path, None)
    monkeypatch.chdir(tmp_path)
    out, err = explain(capsys, str(XID_79_EVENT))
    assert out["mode"] == "dry-run"
    assert err == f"settings: NodeHeal's built-in defaults ({config.resolve()} has no context.nodeheal)\n"


def test_explain_config_names_the_file_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_cdk_json(tmp_path, {"clusters": ["c"], "mode": "cordon-only"})
    other = tmp_path / "other"
    other.mkdir()
    given = write_cdk_json(other, {"clusters": ["c"], "mode": "full"})
    monkeypatch.chdir(tmp_path)
    out, err = explain(capsys, str(XID_79_EVENT), "--config", str(given))
    assert out["mode"] == "full"
    assert err == f"settings: {given}\n"


def test_in_the_checkout_explain_gives_what_operations_md_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operations.md: with the shipped cdk.json (mode dry-run), `nodeheal explain EVENT` decides
    `none (planned: replace)` - without --config, as test-pattern reads it too."""
    monkeypatch.chdir(ROOT)
    out, err = explain(capsys, str(XID_79_EVENT))
    assert (out["action"], out["plannedAction"], out["mode"]) == ("none", "replace", "dry-run")
    assert err == f"settings: {ROOT / 'cdk.json'}\n"
    guide = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    assert "`nodeheal explain EVENT` run in the checkout reads its `cdk.json`" in guide


def test_test_pattern_without_a_cdk_json_says_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["test-pattern", str(XID_79_EVENT)]) == 2
    err = capsys.readouterr().err
    assert f"NodeHeal's built-in defaults (no cdk.json in {tmp_path.resolve()})" in err
    assert "pass --config, --template or --deployed" in err


def test_the_demo_reads_the_working_directorys_cdk_json_else_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("moto")
    from nodeheal.commands.demo import demo_settings

    monkeypatch.chdir(tmp_path)
    assert demo_settings(None) == (
        f"NodeHeal's built-in defaults (no cdk.json in {tmp_path.resolve()})",
        {"clusters": ["training-on-eks"]},
    )
    config = write_cdk_json(tmp_path, {"clusters": ["mine"], "mode": "cordon-only"})
    assert demo_settings(None) == (str(config.resolve()), {"clusters": ["mine"], "mode": "cordon-only"})
    assert demo_settings(str(config))[0] == str(config)


def test_an_explicit_config_must_hold_nodeheals_object(tmp_path: Path) -> None:
    from nodeheal.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"has no context\.nodeheal object"):
        config_source(str(write_cdk_json(tmp_path, None)))
