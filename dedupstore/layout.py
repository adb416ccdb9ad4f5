"""The store directory on disk: a meta environment and one LMDB environment per
partition (docs/format.md is the byte-level description; keep them in step).

    <path>/meta/     format record, store secret, namespace registry
    <path>/p000/     partition 0: records, pending index, partition meta
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

FORMAT_VERSION = 1
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

DURABILITY = {
    # mode: py-lmdb flags. Neither uses writemap or async flushing, so no crash
    # can leave a half-written tree: LMDB's copy-on-write pages plus a synced
    # data file make every committed snapshot self-consistent.
    "sync": {"sync": True, "metasync": True},
    # The meta page write is not fsynced: an OS crash may roll back the last
    # commit(s), never tear one. Everything is durable after store.flush().
    "flush": {"sync": True, "metasync": False},
}


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


def open_env(path: Path, *, map_size: int, durability: str, max_dbs: int) -> lmdb.Environment:
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
            **DURABILITY[durability],
        )
    except lmdb.InvalidError as exc:
        raise StoreFormatError(f"{path} is not a valid LMDB environment (corrupt or foreign): {exc}") from None
    except lmdb.VersionMismatchError as exc:
        raise StoreFormatError(f"{path} was written by an incompatible LMDB: {exc}") from None
    except lmdb.Error as exc:
        raise StoreFormatError(f"cannot open {path}: {exc}") from None
    # A data file shorter than the pages its meta page claims would be read
    # through the map as SIGBUS, a crash rather than an error: refuse it here.
    data = path / "data.mdb"
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    if data.stat().st_size < need:
        env.close()
        raise StoreFormatError(
            f"{data} is truncated: {data.stat().st_size:,} bytes, but its last committed page ends at {need:,}"
        )
    return env


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
    env = open_env(meta_dir, map_size=META_MAP_SIZE, durability="sync", max_dbs=0)
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
