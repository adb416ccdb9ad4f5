"""Extension modules only; all metadata lives in pyproject.toml.

DEDUPSTORE_DEBUG_BUILD=1 builds with -O0 -g3 and C asserts on (-UNDEBUG);
DEDUPSTORE_STRICT_BUILD=1 (CI) adds -Werror for the C engine's own warnings;
DEDUPSTORE_PGO=1 builds profile-guided with GCC (BuildExt; scripts/dev.sh
does, docs/build.md tells what it costs and gains).
"""

import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

DEBUG = os.environ.get("DEDUPSTORE_DEBUG_BUILD", "") not in ("", "0")
STRICT = os.environ.get("DEDUPSTORE_STRICT_BUILD", "") not in ("", "0")
PGO = os.environ.get("DEDUPSTORE_PGO", "") not in ("", "0")
ROOT = Path(__file__).resolve().parent

CSRC = [
    "csrc/ds_hash.c", "csrc/ds_canon.c", "csrc/ds_record.c", "csrc/ds_decide.c", "csrc/ds_bloom.c", "csrc/ds_gsync.c",
    "csrc/ds_log.c", "csrc/ds_lmdb.c", "csrc/ds_sort.c",
]

compile_args = ["-std=c11", "-pthread", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter"]
if DEBUG:
    compile_args += ["-O0", "-g3", "-UNDEBUG", "-DDS_DEBUG_BUILD"]
else:
    compile_args += ["-O2"]
if STRICT:
    compile_args += ["-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types"]

extensions = [
    Extension(
        "dedupstore._native",
        sources=["dedupstore/_native.pyx", *CSRC],
        include_dirs=["csrc"],
        extra_compile_args=compile_args,
        extra_link_args=["-pthread"],  # csrc/ds_gsync.c's thread
        libraries=["dl"],  # csrc/ds_lmdb.c: dlopen, dlsym (in libc itself since glibc 2.34)
        undef_macros=["NDEBUG"] if DEBUG else [],
    )
]


class BuildExt(build_ext):
    """build_ext, profile-guided when DEDUPSTORE_PGO=1: the extension is
    built with GCC's -fprofile-generate, scripts/pgo_train.py drives that
    build as consumers drive the store (in a copy of the package, with the
    runtime dependencies this Python already has: build without isolation),
    and the extension is built again with -fprofile-use, which lays the code
    that ran out together and leaves the code that did not at -O2.

    A stamp in the build directory names how the extension there was built
    (plain, or profile-guided from which sources and flags): a build of the
    other kind, a profile-guided one from changed sources or one that
    setuptools would compile again (a source newer than the module), and a
    build cut short, start over; an up-to-date one is reused as setuptools
    reuses any."""

    def run(self) -> None:
        stamp = Path(self.build_temp) / "dedupstore-build.stamp"
        old = stamp.read_text() if stamp.exists() else "plain"
        want = "plain"
        if PGO:
            problem = "a debug build is not profiled" if DEBUG else _not_gcc()
            if problem:
                print(f"DEDUPSTORE_PGO: {problem}; building without a profile", file=sys.stderr)
            else:
                want = "pgo " + _fingerprint(self.extensions)
        if old == want and (want == "plain" or self._up_to_date()):
            super().run()  # setuptools' own check: an up-to-date build is reused
        else:
            # Until this build ends, the stamp names none: one cut short
            # (an instrumented module left behind) is redone, whatever comes next.
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text("incomplete")
            self.force = True
            if want == "plain":
                super().run()
            else:
                self._run_pgo(Path(self.build_temp).resolve() / "pgo")
        stamp.write_text(want)

    def _up_to_date(self) -> bool:
        # Whether setuptools would reuse every module built before (each
        # newer than its sources and dependencies) rather than compile it
        # again without the profile.
        for ext in self.extensions:
            built = Path(self.get_ext_fullpath(ext.name))
            if not built.exists():
                return False
            inputs = [Path(src) for src in [*ext.sources, *ext.depends]]
            if any(src.stat().st_mtime > built.stat().st_mtime for src in inputs if src.exists()):
                return False
        return True

    def _run_pgo(self, profiles: Path) -> None:
        shutil.rmtree(profiles, ignore_errors=True)  # counts would add to a stale profile's
        profiles.mkdir(parents=True)
        self._stage([f"-fprofile-generate={profiles}", "-DDS_PGO_STAGE=1"], [f"-fprofile-generate={profiles}"])
        self._train()
        if not any(profiles.rglob("*.gcda")):
            raise RuntimeError(f"DEDUPSTORE_PGO: the training run wrote no profile into {profiles}")
        self.force = True
        self._stage(
            [f"-fprofile-use={profiles}", "-fprofile-partial-training", "-Wno-missing-profile", "-DDS_PGO_STAGE=2"], []
        )

    def _stage(self, compile_extra: list[str], link_extra: list[str]) -> None:
        # One build of every extension with these flags added.
        saved = [(ext.extra_compile_args, ext.extra_link_args) for ext in self.extensions]
        compiler = self.compiler  # run() turns the name into an instance, which a second run() refuses
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, *compile_extra]
            ext.extra_link_args = [*ext.extra_link_args, *link_extra]
        try:
            super().run()
        finally:
            self.compiler = compiler
            for ext, (cargs, largs) in zip(self.extensions, saved, strict=True):
                ext.extra_compile_args, ext.extra_link_args = cargs, largs

    def _train(self) -> None:
        # scripts/pgo_train.py against the instrumented build: the package's
        # Python modules and that build, copied into a directory of their own.
        with tempfile.TemporaryDirectory(prefix="dedupstore-pgo-") as tmp:
            pkg = Path(tmp) / "dedupstore"
            shutil.copytree(ROOT / "dedupstore", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
            for ext in self.extensions:
                built = Path(self.get_ext_fullpath(ext.name))
                shutil.copy2(built, pkg / built.name)
            path = os.environ.get("PYTHONPATH")
            env = dict(os.environ, PYTHONPATH=tmp if not path else tmp + os.pathsep + path)
            rc = subprocess.call([sys.executable, str(ROOT / "scripts" / "pgo_train.py")], cwd=tmp, env=env)
            if rc:
                raise RuntimeError(
                    f"DEDUPSTORE_PGO: the training run (scripts/pgo_train.py) exited {rc}; it imports the "
                    f"package's runtime dependencies (lmdb, tqdm), so build without isolation in an "
                    f"environment that has them (pip install --no-build-isolation), or without DEDUPSTORE_PGO"
                )


def _compiler() -> tuple[str, str]:
    """(the C compiler's command, the banner its --version prints; '' if it
    printed none)."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    try:
        return cc, subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return cc, ""


def _not_gcc() -> str:
    """Why the C compiler cannot make a profile-guided build ('' if it can):
    the flags are GCC's."""
    cc, banner = _compiler()
    if "Free Software Foundation" not in banner or "clang" in banner.lower():
        return f"{cc} is not GCC"
    return ""


def _fingerprint(extensions: list[Extension]) -> str:
    """What a profile depends on: the C the build compiles (Cython's output
    included) and its headers, the training run, the flags, the compiler
    and Python."""
    h = hashlib.sha256()
    paths = {ROOT / "scripts" / "pgo_train.py"}
    for ext in extensions:
        paths.update(Path(src).resolve() for src in ext.sources)
        for inc in ext.include_dirs:
            paths.update((ROOT / inc).glob("*.h"))
        h.update(repr((ext.extra_compile_args, ext.extra_link_args)).encode())
    for path in sorted(paths):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    h.update(repr((_compiler()[1], sys.version)).encode())
    return h.hexdigest()


class BuildPyWithProto(build_py):
    """The pure-Python build, plus the wire contract's modules generated
    from dedupstore/v1/dedupstore.proto into the build directory (never the
    source tree; scripts/genproto.py does the generating)."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        spec = importlib.util.spec_from_file_location("genproto", root / "scripts" / "genproto.py")
        assert spec is not None and spec.loader is not None
        genproto = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(genproto)
        genproto.generate(Path(self.build_lib), root)


setup(
    cmdclass={"build_py": BuildPyWithProto, "build_ext": BuildExt},
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        gdb_debug=DEBUG,
        # Cython writes _native.c next to the .pyx; build_dir keeps it in build/.
        build_dir="build/cython",
    )
)
