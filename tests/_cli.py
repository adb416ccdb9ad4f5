"""Running the ``dedupstore`` command in-process, for the CLI tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dedupstore.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``dedupstore ARGV``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, expect: int = 0) -> dict[str, Any]:
    """The JSON document ``dedupstore ARGV --json`` prints, after checking its exit code."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == expect, err
    document = json.loads(out)
    assert isinstance(document, dict)
    return document


def rows(out: str) -> dict[str, str]:
    """The aligned table as label -> value; labels and values are separated by three or more spaces."""
    table = {}
    for line in out.splitlines():
        label, sep, value = line.partition("   ")
        assert sep, f"not a table row: {line!r}"
        table[label.strip()] = value.strip()
    return table
