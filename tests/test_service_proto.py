"""The wire contract: the committed generated modules match the .proto, and the .proto ships."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import dedupstore.v1
from dedupstore.v1 import dedupstore_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


def test_regenerating_the_modules_changes_nothing() -> None:
    # scripts/genproto.py --check runs protoc (grpcio-tools, pinned in the test
    # extra) into a temporary directory and compares byte for byte.
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "genproto.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


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
