"""The wire contract: the installed generated modules match the .proto, and the .proto ships."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import dedupstore.v1
from dedupstore.v1 import dedupstore_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


def test_regenerating_the_modules_changes_nothing() -> None:
    # scripts/genproto.py --check runs protoc (grpcio-tools, pinned as the
    # build's) into a temporary directory and compares byte for byte with the
    # modules the build generated into the installed package.
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "genproto.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_generated_modules_are_not_in_the_repository() -> None:
    # They are the build's output (setup.py): a committed copy could drift
    # from the .proto unnoticed by an install, which regenerates anyway.
    tracked = subprocess.run(
        ["git", "ls-files", "dedupstore/v1"], cwd=ROOT, capture_output=True, text=True
    )
    if tracked.returncode != 0:
        pytest.skip(f"not a git checkout: {tracked.stderr.strip()}")
    assert sorted(tracked.stdout.split()) == ["dedupstore/v1/__init__.py", "dedupstore/v1/dedupstore.proto"]


def test_the_proto_ships_inside_the_package() -> None:
    shipped = resources.files(dedupstore.v1).joinpath("dedupstore.proto").read_text()
    assert shipped == (ROOT / "dedupstore" / "v1" / "dedupstore.proto").read_text()
    service = pb.DESCRIPTOR.services_by_name["DedupStore"]
    assert service.full_name == "dedupstore.v1.DedupStore"
    assert [m.name for m in service.methods] == [
        "Claim", "ClaimBatch", "Complete", "Release", "Renew", "Lookup", "Stats",
        "CompleteBatch", "ReleaseBatch", "Unresolved",
    ]


def test_wire_status_values_are_the_engine_codes() -> None:
    from dedupstore import Status
    from dedupstore.wire import STATUS_VALUE

    assert {s.name: v for s, v in STATUS_VALUE.items()} == {
        name: pb.Status.Value(name) for name in (s.name for s in Status)
    }
