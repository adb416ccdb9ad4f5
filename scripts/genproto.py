#!/usr/bin/env python3
"""Generate the Python modules of the wire contract from dedupstore/v1/dedupstore.proto.

    .venv/bin/python scripts/genproto.py           # rewrite the committed modules
    .venv/bin/python scripts/genproto.py --check   # exit 1 if they differ from a fresh generation

The generated modules are committed (so installing the package needs no code
generator) and tests/test_service_proto.py runs the check, so the .proto and
the modules cannot drift. The output depends on the grpcio-tools version, which
is pinned in pyproject.toml's `test` extra: regenerate after changing either.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = "dedupstore/v1/dedupstore.proto"
OUTPUTS = ("dedupstore_pb2.py", "dedupstore_pb2.pyi", "dedupstore_pb2_grpc.py")


def generate(out_dir: Path) -> dict[str, bytes]:
    """Run protoc (from grpcio-tools) on the .proto into ``out_dir``; the generated files by name."""
    from grpc_tools import protoc  # the generator is a test/dev dependency, not a runtime one

    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(ROOT / PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"genproto: protoc failed on {PROTO}")
    gen = out_dir / Path(PROTO).parent
    return {name: (gen / name).read_bytes() for name in OUTPUTS}


def differences() -> list[str]:
    """The committed modules that a fresh generation would change."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    target = ROOT / Path(PROTO).parent
    return [
        name for name, data in fresh.items() if not (target / name).is_file() or (target / name).read_bytes() != data
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if the committed modules differ")
    args = parser.parse_args()
    if args.check:
        stale = differences()
        if stale:
            print(f"genproto: stale generated modules: {', '.join(stale)}; run scripts/genproto.py", file=sys.stderr)
            return 1
        print("genproto: generated modules are up to date")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    target = ROOT / Path(PROTO).parent
    for name, data in fresh.items():
        (target / name).write_bytes(data)
        print(f"genproto: wrote {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
