"""Build and run the C engine's own unit tests (csrc/tests/test_*.c).

The engine is plain C, so its tests compile with nothing but a C compiler; under
ASan/UBSan where the toolchain has them, so an out-of-bounds read in the record
codec or a signed overflow in the decision table fails here rather than in
production. The paths come from this file's location, not from the installed
package: the sources are not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parent.parent / "csrc"

BASE_FLAGS = ["-std=c11", "-pthread", "-Wall", "-Wextra", "-Werror", "-O1", "-g"]
# Recovering from a UBSan report would only print it; make every report fatal.
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
SANITIZER_ENV = {
    "ASAN_OPTIONS": "abort_on_error=0:halt_on_error=1:detect_leaks=1:exitcode=99",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=98",
}


def _compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH: the C engine's unit tests cannot be built")
    return cc


def _sanitizers_work(cc: str, tmp_path: Path) -> bool:
    """Whether a sanitized program both links and runs here: the runtime may be
    missing, or (LeakSanitizer under ptrace, some containers) refuse to start."""
    probe = tmp_path / "probe.c"
    probe.write_text("#include <stdlib.h>\nint main(void) { void *p = malloc(8); free(p); return 0; }\n")
    exe = tmp_path / "probe"
    build = subprocess.run(
        [cc, *BASE_FLAGS, *SANITIZE_FLAGS, str(probe), "-o", str(exe)], capture_output=True, text=True
    )
    if build.returncode != 0:
        return False
    run = subprocess.run([str(exe)], capture_output=True, text=True, env={**os.environ, **SANITIZER_ENV}, timeout=60)
    return run.returncode == 0


@pytest.mark.parametrize(
    ("program", "defines"),
    [
        ("test_engine", []),
        ("test_bloom", []),
        # The filters' probe without GCC's vector types: its plain loop.
        ("test_bloom", ["-DDS_BLOOM_NO_VECTORS"]),
        ("test_gsync", []),
        # The group fdatasync without Linux's futex: its portable wake-ups.
        ("test_gsync", ["-DDS_GSYNC_NO_FUTEX"]),
        ("test_log", []),
        ("test_sort", []),
    ],
    ids=["engine", "bloom", "bloom-no-vectors", "gsync", "gsync-no-futex", "log", "sort"],
)
def test_c_unit_tests(tmp_path: Path, program: str, defines: list[str]) -> None:
    cc = _compiler()
    test_source = CSRC / "tests" / f"{program}.c"
    sources = sorted(CSRC.glob("ds_*.c"))
    # The engine files the extension is built from; an empty glob would
    # "pass" by linking nothing, so insist they are all there.
    engine = {
        "ds_hash.c", "ds_canon.c", "ds_record.c", "ds_decide.c", "ds_bloom.c", "ds_gsync.c", "ds_log.c", "ds_sort.c",
    }
    assert {p.name for p in sources} >= engine
    assert test_source.is_file(), test_source

    sanitized = _sanitizers_work(cc, tmp_path)
    flags = BASE_FLAGS + (SANITIZE_FLAGS if sanitized else [])
    exe = tmp_path / program
    # -lm is for the test programs' statistics; the engine itself uses no libm.
    build = subprocess.run(
        [cc, *flags, *defines, f"-I{CSRC}", str(test_source), *map(str, sources), "-lm", "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"compiling {program}.c failed:\n{build.stdout}{build.stderr}"

    env = {**os.environ, **SANITIZER_ENV} if sanitized else None
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
    report = f"sanitizers: {'on' if sanitized else 'off'}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    lines = run.stdout.strip().splitlines()
    assert lines, f"the C test program printed nothing\n{report}"
    last = lines[-1]
    passed, _, failed = last.partition(" passed, ")
    assert failed == "0 failed", f"{program} failed: {last}\n{report}"
    assert passed.isdigit() and int(passed) > 0, f"unexpected summary line {last!r}\n{report}"
    assert run.returncode == 0, f"the C test program exited {run.returncode}\n{report}"
