"""Extension modules only; all metadata lives in pyproject.toml.

DEDUPSTORE_DEBUG_BUILD=1 builds with -O0 -g3 and C asserts on (-UNDEBUG);
DEDUPSTORE_STRICT_BUILD=1 (CI) adds -Werror for the C engine's own warnings.
"""

import importlib.util
import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

DEBUG = os.environ.get("DEDUPSTORE_DEBUG_BUILD", "") not in ("", "0")
STRICT = os.environ.get("DEDUPSTORE_STRICT_BUILD", "") not in ("", "0")

CSRC = [
    "csrc/ds_hash.c", "csrc/ds_canon.c", "csrc/ds_record.c", "csrc/ds_decide.c", "csrc/ds_bloom.c", "csrc/ds_gsync.c",
    "csrc/ds_log.c", "csrc/ds_lmdb.c",
]

compile_args = ["-std=c11", "-pthread", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter"]
if DEBUG:
    compile_args += ["-O0", "-g3", "-UNDEBUG"]
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
    cmdclass={"build_py": BuildPyWithProto},
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        gdb_debug=DEBUG,
        # Cython writes _native.c next to the .pyx; build_dir keeps it in build/.
        build_dir="build/cython",
    )
)
