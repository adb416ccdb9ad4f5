#!/usr/bin/env python3
"""Generate the Python modules of the wire contract from dedupstore/v1/dedupstore.proto.

    .venv/bin/python scripts/genproto.py           # write them into the source tree (for mypy and editors)
    .venv/bin/python scripts/genproto.py --check   # exit 1 if the installed package's differ from a fresh generation

The modules are generated, not committed: the build does it (setup.py's
build_py step calls :func:`generate` into the build directory, so an
installed package always carries modules made from its own .proto), and
scripts/dev.sh runs this script before the type check, writing the copies
mypy reads into the source tree, where .gitignore keeps them out of the
repository. tests/test_service_proto.py runs ``--check`` against the
installed package. The output depends on the grpcio-tools version, pinned in
pyproject.toml's build requirements (and the `test` extra, for ``--check``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = "dedupstore/v1/dedupstore.proto"
OUTPUTS = ("dedupstore_pb2.py", "dedupstore_pb2.pyi", "dedupstore_pb2_grpc.py")


def generate(out_dir: Path, root: Path = ROOT) -> dict[str, bytes]:
    """Run protoc (from grpcio-tools) on ``root``'s .proto into ``out_dir``
    (as ``out_dir/dedupstore/v1/``); the generated files by name."""
    from grpc_tools import protoc  # a build (and test) requirement, not a runtime one

    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(root / PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"genproto: protoc failed on {root / PROTO}")
    gen = out_dir / Path(PROTO).parent
    return {name: (gen / name).read_bytes() for name in OUTPUTS}


def installed_differences() -> list[str]:
    """The installed package's generated modules that a fresh generation
    from this checkout's .proto would change (missing ones included)."""
    from importlib import resources

    import dedupstore.v1

    installed = resources.files(dedupstore.v1)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    return [
        name for name, data in fresh.items()
        if not installed.joinpath(name).is_file() or installed.joinpath(name).read_bytes() != data
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="only compare the installed package's modules; exit 1 if they differ")
    args = parser.parse_args()
    if args.check:
        stale = installed_differences()
        if stale:
            print(f"genproto: the installed package's {', '.join(stale)} differ from a fresh generation "
                  f"from {PROTO}: reinstall it", file=sys.stderr)
            return 1
        print("genproto: the installed generated modules match the .proto")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    target = ROOT / Path(PROTO).parent
    for name, data in fresh.items():
        (target / name).write_bytes(data)
    print(f"genproto: wrote {', '.join(fresh)} into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
