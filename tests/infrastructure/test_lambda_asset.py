"""The wheelhouse checks of the Lambda asset builder (no pip, no network)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeheal.cdk import lambda_asset
from nodeheal.cdk.lambda_asset import (
    REQUIREMENTS,
    WHEELHOUSE_STAMP,
    LambdaAssetError,
    build,
    check_wheelhouse,
    directory_size,
    download,
    main,
)


def requirements(tmp_path: Path, text: str = "kubernetes==37.0.1\n") -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def test_missing_wheelhouse_says_which_command_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkout's wheelhouse (build/wheelhouse or NODEHEAL_WHEELHOUSE) is the Makefile's.
    monkeypatch.setattr(lambda_asset, "WHEELHOUSE", tmp_path / "wheelhouse")
    with pytest.raises(LambdaAssetError, match=r"missing; run `make lambda-deps`"):
        check_wheelhouse(tmp_path / "wheelhouse", requirements(tmp_path))


def test_wheelhouse_without_wheels_is_missing(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / WHEELHOUSE_STAMP).write_text("kubernetes==37.0.1\n")
    with pytest.raises(LambdaAssetError, match="missing"):
        check_wheelhouse(wheelhouse, requirements(tmp_path))


def test_stale_wheelhouse_is_refused(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "kubernetes-36.0.0-py3-none-any.whl").write_bytes(b"")
    (wheelhouse / WHEELHOUSE_STAMP).write_text("kubernetes==36.0.0\n")
    with pytest.raises(LambdaAssetError, match="changed since the wheelhouse"):
        check_wheelhouse(wheelhouse, requirements(tmp_path))


def test_current_wheelhouse_passes(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "kubernetes-37.0.1-py3-none-any.whl").write_bytes(b"")
    (wheelhouse / WHEELHOUSE_STAMP).write_text("kubernetes==37.0.1\n")
    check_wheelhouse(wheelhouse, requirements(tmp_path))


def test_build_never_runs_pip_without_a_wheelhouse(tmp_path: Path) -> None:
    output = tmp_path / "asset"
    output.mkdir()
    with pytest.raises(LambdaAssetError):
        build(output, tmp_path / "wheelhouse", requirements(tmp_path))
    assert list(output.iterdir()) == []


def test_directory_size_counts_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
    assert directory_size(tmp_path) == 15


def test_download_skips_the_index_when_the_wheelhouse_is_current(tmp_path: Path) -> None:
    # Sockets are loopback-only in tests: reaching pip's index would fail this test.
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "kubernetes-37.0.1-py3-none-any.whl").write_bytes(b"")
    (wheelhouse / WHEELHOUSE_STAMP).write_text("kubernetes==37.0.1\n")
    assert download(wheelhouse, requirements(tmp_path)) is False


def test_a_reworded_comment_does_not_make_the_wheelhouse_stale(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "urllib3-2.8.0-py3-none-any.whl").write_bytes(b"")
    (wheelhouse / WHEELHOUSE_STAMP).write_text("# made by make lambda-deps\nurllib3==2.8.0\n")
    check_wheelhouse(
        wheelhouse,
        requirements(
            tmp_path, "# made by `python -m nodeheal.cdk.lambda_asset`\n\nurllib3==2.8.0  # pinned\n"
        ),
    )
    with pytest.raises(LambdaAssetError, match="changed since the wheelhouse"):
        check_wheelhouse(wheelhouse, requirements(tmp_path, "urllib3==2.8.1\n"))


def test_a_named_wheelhouse_names_the_download_command_for_it(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    with pytest.raises(
        LambdaAssetError, match=rf"python -m nodeheal\.cdk\.lambda_asset download --wheelhouse {wheelhouse}"
    ):
        check_wheelhouse(wheelhouse, requirements(tmp_path))


def test_download_into_a_named_wheelhouse_goes_no_further(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "urllib3-2.8.0-py3-none-any.whl").write_bytes(b"")
    shutil.copyfile(REQUIREMENTS, wheelhouse / WHEELHOUSE_STAMP)
    assert main(["download", "--wheelhouse", str(wheelhouse)]) == 0
    assert capsys.readouterr().out == f"1 wheels in {wheelhouse} (up to date)\n"
