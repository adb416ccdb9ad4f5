"""The store directory on disk: a meta environment and one LMDB environment per
partition (docs/format.md is the byte-level description; keep them in step).

    <path>/meta/     format record, store secret, namespace registry
    <path>/p000/     partition 0: completed records by generation, unresolved records, partition meta
    <path>/p001/ ...
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from .errors import StoreFormatError

FORMAT_VERSION = 2
MAGIC = "dedupstore"
MAX_PARTITIONS = 256
DEFAULT_PARTITIONS = 4
#: Virtual address space reserved per partition. LMDB grows the file as data
#: arrives; the map size is only the ceiling past which writes raise StoreFullError.
DEFAULT_MAP_SIZE = 256 << 30
META_MAP_SIZE = 256 << 20
MAX_READERS = 1024

FORMAT_KEY = b"format"
NS_KEY = b"ns/"  # + name -> namespace config JSON
NSID_KEY = b"nsid/"  # + 2-byte id -> name

#: The durability modes (docs/guarantees.md). Both open partitions with
#: ``MDB_NOSYNC`` and no write map or asynchronous flushing (a commit writes
#: its pages with ``write()``), made durable by checkpoints
#: (dedupstore/checkpoint.py). ``sync`` also journals every commit and
#: fdatasyncs the journal before the callers return (dedupstore/journal.py).
DURABILITY = ("sync", "flush")


@dataclass(frozen=True)
class StoreInfo:
    format_version: int
    store_id: str
    partitions: int
    secret: bytes
    created: float

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "magic": MAGIC,
                "format_version": self.format_version,
                "store_id": self.store_id,
                "partitions": self.partitions,
                "secret": self.secret.hex(),
                "created": self.created,
            },
            sort_keys=True,
        ).encode()


def parse_format(raw: bytes, where: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("magic") != MAGIC:
        raise StoreFormatError(f"{where} is not a dedupstore store (its format record is not ours)")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreFormatError(
            f"{where} has on-disk format version {version!r}; this dedupstore reads version "
            f"{FORMAT_VERSION} only and refuses to guess (see docs/format.md, 'Versions')"
        )
    return data


def open_env(path: Path, *, map_size: int, max_dbs: int, synced: bool) -> lmdb.Environment:
    """Open one LMDB environment of the store. ``synced``: LMDB fsyncs every
    commit itself (the meta environment); otherwise commits are made durable
    by checkpoints (partitions)."""
    try:
        env = lmdb.open(
            str(path),
            map_size=map_size,
            subdir=True,
            max_dbs=max_dbs,
            max_readers=MAX_READERS,
            readahead=False,  # random access: read-ahead only evicts useful pages
            writemap=False,
            map_async=False,
            sync=synced,
            metasync=synced,
        )
    except lmdb.InvalidError as exc:
        raise StoreFormatError(f"{path} is not a valid LMDB environment (corrupt or foreign): {exc}") from None
    except lmdb.VersionMismatchError as exc:
        raise StoreFormatError(f"{path} was written by an incompatible LMDB: {exc}") from None
    except lmdb.Error as exc:
        raise StoreFormatError(f"cannot open {path}: {exc}") from None
    # A page past the end of the data file is read through the map as SIGBUS,
    # a crash rather than an error: refuse a file cut short under its roots.
    problem = missing_roots(path / "data.mdb", int(env.stat()["psize"]))
    if problem is not None:
        env.close()
        raise StoreFormatError(problem)
    return env


# LMDB 0.9's page layout on a 64-bit build (lmdb's mdb.c): a 16-byte page
# header (pgno u64, pad u16, flags u16, lower u16, upper u16); the meta page's
# MDB_meta after it, with the free and main databases' MDB_db records (48
# bytes each, the root page number at +40), last page number and txn id.
_PAGE_HEADER = 16
_META_TXNID = 144
_META_ROOTS = {"free list": 80, "main database": 128}
_DB_ROOT = 40
_P_LEAF = 0x02
_F_SUBDATA = 0x02
_NO_PAGE = (1 << 64) - 1


def missing_roots(data: Path, psize: int) -> str | None:
    """Why ``data`` (an LMDB data file) cannot be read safely, or None.

    The test is that the newest meta page's roots, and the roots of the named
    databases listed in the main database, lie inside the file. Comparing the
    file's size with LMDB's last page number is not the test: a page allocated
    and freed again in one transaction is counted there but never written, so
    a healthy file can end before it. Pages deeper in the trees are only
    checked by ``dedupstore verify``'s walk."""
    try:
        with open(data, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 2 * psize:
                return f"{data} is truncated: {size:,} bytes, shorter than LMDB's two meta pages"

            def page(pgno: int) -> bytes:
                return os.pread(f.fileno(), psize, pgno * psize)

            metas = [page(0), page(1)]
            meta = max(metas, key=lambda m: int.from_bytes(m[_META_TXNID : _META_TXNID + 8], "little"))
            roots = {name: int.from_bytes(meta[at : at + 8], "little") for name, at in _META_ROOTS.items()}
            main = roots["main database"]
            if main != _NO_PAGE and (main + 1) * psize <= size:
                leaf = page(main)
                flags = int.from_bytes(leaf[10:12], "little")
                lower = int.from_bytes(leaf[12:14], "little")
                if flags & _P_LEAF:
                    for i in range(max(0, (lower - _PAGE_HEADER) // 2)):
                        at = int.from_bytes(leaf[_PAGE_HEADER + 2 * i : _PAGE_HEADER + 2 * i + 2], "little")
                        if at + 8 > psize:
                            break
                        nflags = int.from_bytes(leaf[at + 4 : at + 6], "little")
                        ksize = int.from_bytes(leaf[at + 6 : at + 8], "little")
                        root_at = at + 8 + ksize + _DB_ROOT
                        if nflags & _F_SUBDATA and root_at + 8 <= psize:
                            name = leaf[at + 8 : at + 8 + ksize].decode("ascii", "replace")
                            roots[f"database {name!r}"] = int.from_bytes(leaf[root_at : root_at + 8], "little")
    except OSError as exc:
        return f"cannot read {data}: {exc}"
    for name, root in roots.items():
        if root != _NO_PAGE and (root + 1) * psize > size:
            return (
                f"{data} is truncated: {size:,} bytes, but the root page of its {name} "
                f"(page {root:,}) ends at byte {(root + 1) * psize:,}"
            )
    return None


def open_meta(root: Path, *, create: bool, partitions: int | None, now: float) -> tuple[lmdb.Environment, StoreInfo]:
    """Open (or create) the meta environment and return the store's identity."""
    if root.exists() and not root.is_dir():
        raise StoreFormatError(f"{root} is a file, not a dedupstore directory")
    meta_dir = root / "meta"
    if not meta_dir.is_dir():
        if not create:
            raise StoreFormatError(f"{root} is not a dedupstore store (no meta/) and create=False")
        if root.is_dir() and any(p.name not in ("meta",) for p in root.iterdir()):
            raise StoreFormatError(
                f"{root} is not empty and is not a dedupstore store (no meta/); refusing to write into it"
            )
        meta_dir.mkdir(parents=True, exist_ok=True)
    env = open_env(meta_dir, map_size=META_MAP_SIZE, max_dbs=0, synced=True)
    try:
        with env.begin(write=create) as txn:
            raw = txn.get(FORMAT_KEY)
            if raw is None:
                if txn.cursor().first():
                    raise StoreFormatError(f"{meta_dir} holds an LMDB environment that is not a dedupstore's")
                if not create:
                    raise StoreFormatError(f"{root} is not an initialised dedupstore store and create=False")
                parts = DEFAULT_PARTITIONS if partitions is None else partitions
                info = StoreInfo(FORMAT_VERSION, str(uuid.uuid4()), parts, secrets.token_bytes(16), now)
                # The partitions exist before the store does (this transaction
                # commits after them), so a missing one is always a loss.
                for i in range(parts):
                    partition_dir(root, i).mkdir(exist_ok=True)
                txn.put(FORMAT_KEY, info.to_json())
            else:
                data = parse_format(raw, str(root))
                info = StoreInfo(
                    data["format_version"],
                    data["store_id"],
                    int(data["partitions"]),
                    bytes.fromhex(data["secret"]),
                    float(data["created"]),
                )
                if partitions is not None and partitions != info.partitions:
                    raise StoreFormatError(
                        f"{root} was created with {info.partitions} partitions; got partitions={partitions} "
                        f"(omit it to use the store's own)"
                    )
    except BaseException:
        env.close()
        raise
    return env, info


def partition_dir(root: Path, index: int) -> Path:
    return root / f"p{index:03d}"


def partition_format(info: StoreInfo, index: int) -> bytes:
    return json.dumps(
        {"magic": MAGIC, "format_version": FORMAT_VERSION, "store_id": info.store_id, "partition": index},
        sort_keys=True,
    ).encode()


def check_partition_format(raw: bytes, info: StoreInfo, index: int, where: Path) -> None:
    data = parse_format(raw, str(where))
    if data.get("store_id") != info.store_id or data.get("partition") != index:
        raise StoreFormatError(
            f"{where} belongs to store {data.get('store_id')} partition {data.get('partition')}, "
            f"not to this store ({info.store_id}) partition {index}: directories were mixed up"
        )


def same_file_key(root: Path) -> tuple[int, int]:
    st = os.stat(root)
    return (st.st_dev, st.st_ino)
