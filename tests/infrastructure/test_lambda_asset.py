"""The wheelhouse checks of the Lambda asset builder (no pip, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeheal.cdk.lambda_asset import (
    WHEELHOUSE_STAMP,
    LambdaAssetError,
    build,
    check_wheelhouse,
    directory_size,
    download,
)


def requirements(tmp_path: Path, text: str = "kubernetes==37.0.1\n") -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def test_missing_wheelhouse_says_which_command_fixes_it(tmp_path: Path) -> None:
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
