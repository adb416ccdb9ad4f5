"""``verify_store``: read-only checks of a store directory against docs/format.md.

Everything here reads. Each LMDB environment is opened read-only and examined
in one read transaction (so a partition's generations and pending database
are compared as one commit left them, even while another process writes), and no
``DedupStore`` handle is opened: opening one would create a missing partition
directory, which would hide the very damage this is looking for.

What is checked, in order (docs/cli/verify.md lists every problem kind):

- the meta environment: the format record (magic, format version; another
  version or a foreign directory is refused with :class:`StoreFormatError`, as
  ``DedupStore.open`` refuses it), the namespace registry (every ``ns/<name>``
  parses and its id maps back to it through ``nsid/<id>``);
- the partition directories: exactly ``p000`` .. ``pNNN`` for the recorded
  partition count, each an LMDB environment with its three named databases and a
  format record naming this store and this index;
- LMDB integrity, as far as py-lmdb exposes it: ``env.stat()``/``env.info()``
  figures that must hold (page size, depth, pages in use within the file and the
  map, pages of the databases within the pages in use), then a full cursor walk
  of every database touching every key and value (so every branch, leaf and
  overflow page is reached; LMDB reports a page it cannot reach or read as an
  error), with the entries walked compared to the count in the database header;
- every record, in a generation or in the pending database: its key splits,
  its value decodes, its namespace id is registered, it is routed to this
  partition; a generation holds COMPLETED records only, at or above the
  partition's oldest generation (the ones lookups probe); the pending database
  holds PENDING records only, none of them also in a generation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from . import _native, checkpoint
from .checkpoint import read_record, rollback_due
from .errors import StoreAlreadyOpenError, StoreFormatError
from .journal import JOURNAL_DIR
from .layout import (
    DEFAULT_MAP_SIZE,
    FORMAT_KEY,
    MAX_READERS,
    NS_KEY,
    NSID_KEY,
    missing_roots,
    parse_format,
    partition_dir,
    same_file_key,
)
from .namespace import NamespaceConfig
from .store import _open_lock, _open_stores
from .window import W_KEY, WLOG_DIR, Owner

#: Problems listed in a report; the rest are only counted.
MAX_LISTED = 20
#: Records walked between two calls of the progress callback.
PROGRESS_EVERY = 10_000
#: LMDB's cursor stack holds 32 pages: no tree it writes is deeper.
MAX_DEPTH = 32
#: Named databases of a partition environment (docs/format.md).
PARTITION_DBS = (b"records", b"pending", b"meta")

#: Every problem kind, with what it means (the CLI docs print this table).
PROBLEM_KINDS = {
    "meta-key": "an unexpected or malformed key in the meta environment or a partition's meta database",
    "namespace-config": "a namespace config that does not parse or does not match its id registry",
    "partition-missing": "a partition directory the store's partition count requires is absent",
    "partition-extra": "a partition directory beyond the store's partition count",
    "partition-open": "a partition (or the meta) environment that LMDB cannot open, or a missing named database",
    "partition-format": "a partition format record that is absent, not ours, or names another store or index",
    "recovery-pending": "the machine restarted since the last checkpoint: open rolls back to it, replays the journal",
    "write-behind": "a partition's write-behind entry (meta key W) that does not decode or names a missing log",
    "lmdb-stat": "LMDB's own figures cannot be right (page size, depth, pages in use versus file and map size)",
    "lmdb-walk": "LMDB failed while walking a database: a page is unreachable or corrupt",
    "lmdb-count": "the entries walked differ from the count in the database header",
    "record-key": "a record key shorter than its 6-byte prefix or with a business key over 400 bytes",
    "record-decode": "a record value that does not decode (unknown record version, bad state or flags, wrong size)",
    "record-namespace": "a record whose namespace id is not registered",
    "record-partition": "a record stored in a partition its key does not route to (lookups never find it)",
    "record-generation": "a record below the partition's oldest generation (lookups never probe it)",
    "record-unresolved": "a PENDING record in a generation (unresolved records live in the pending database)",
    "pending-entry": "a pending-database key shorter than its 2-byte prefix or with a business key over 400 bytes",
    "pending-completed": "a COMPLETED record in the pending database (completed records live in a generation)",
    "pending-duplicate": "a key both in the pending database and in a generation (lookups find the generation's)",
}


@dataclass(frozen=True)
class Problem:
    """One thing found wrong. ``where`` is ``meta``, ``store`` or a partition directory name."""

    where: str
    kind: str
    message: str
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "kind": self.kind, "key": self.key, "message": self.message}


@dataclass
class EnvFigures:
    """LMDB's figures for one environment."""

    page_size: int = 0
    pages_used: int = 0
    map_size: int = 0
    file_bytes: int = 0
    last_txnid: int = 0

    @property
    def bytes_used(self) -> int:
        return self.pages_used * self.page_size

    def to_dict(self) -> dict[str, Any]:
        return {
            "page_size": self.page_size,
            "pages_used": self.pages_used,
            "bytes_used": self.bytes_used,
            "file_bytes": self.file_bytes,
            "map_size": self.map_size,
            "last_txnid": self.last_txnid,
        }


@dataclass
class PartitionReport:
    partition: int
    opened: bool = False
    records: int = 0
    pending_records: int = 0
    completed_records: int = 0
    lmdb: EnvFigures = field(default_factory=EnvFigures)

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "opened": self.opened,
            "records": self.records,
            "pending_records": self.pending_records,
            "completed_records": self.completed_records,
            "lmdb": self.lmdb.to_dict(),
        }


@dataclass
class VerifyReport:
    path: str
    store_id: str
    format_version: int
    partitions: int
    namespaces: list[str] = field(default_factory=list)
    partition_reports: list[PartitionReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    problems_total: int = 0
    problem_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problems_total == 0

    def total(self, attr: str) -> int:
        return sum(int(getattr(p, attr)) for p in self.partition_reports)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "store_id": self.store_id,
            "format_version": self.format_version,
            "partitions": self.partitions,
            "namespaces": list(self.namespaces),
            "records": self.total("records"),
            "pending_records": self.total("pending_records"),
            "completed_records": self.total("completed_records"),
            "bytes_used": sum(p.lmdb.bytes_used for p in self.partition_reports),
            "partition_stats": [p.to_dict() for p in self.partition_reports],
            "problems_total": self.problems_total,
            "problem_kinds": dict(self.problem_kinds),
            "problems": [p.to_dict() for p in self.problems],
            "ok": self.ok,
        }


def _text(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + b.hex()


def _open_readonly(path: Path, max_dbs: int) -> lmdb.Environment:
    # A large map: a reader whose map is smaller than the file another process
    # has grown gets MDB_MAP_RESIZED. It is address space only.
    return lmdb.open(
        str(path),
        readonly=True,
        create=False,
        subdir=True,
        max_dbs=max_dbs,
        max_readers=MAX_READERS,
        map_size=DEFAULT_MAP_SIZE,
        readahead=False,
    )


class _Verifier:
    def __init__(self, root: Path, max_listed: int, progress: Callable[[int, int], None] | None) -> None:
        self.root = root
        self.max_listed = max_listed
        self.progress = progress
        self.problems: list[Problem] = []
        self.total = 0
        self.kinds: dict[str, int] = {}
        self.ns_by_id: dict[int, NamespaceConfig] = {}
        self.done = 0
        self.expected = 0

    def problem(self, where: str, kind: str, message: str, key: str | None = None) -> None:
        assert kind in PROBLEM_KINDS, kind
        self.total += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if len(self.problems) < self.max_listed:
            self.problems.append(Problem(where, kind, " ".join(message.split()), key))

    def label(self, ns_id: int, key: bytes) -> str:
        cfg = self.ns_by_id.get(ns_id)
        return f"{cfg.name if cfg else f'#{ns_id}'}/{_text(key)}"

    # ---------------------------------------------------------------- LMDB level

    def env_figures(self, where: str, path: Path, env: lmdb.Environment) -> EnvFigures | None:
        """LMDB's figures, or None (after reporting) when walking the file could fault."""
        info = env.info()
        st = env.stat()
        fig = EnvFigures(
            page_size=int(st["psize"]),
            pages_used=int(info["last_pgno"]) + 1,
            map_size=int(info["map_size"]),
            last_txnid=int(info["last_txnid"]),
        )
        try:
            fig.file_bytes = (path / "data.mdb").stat().st_size
        except OSError as exc:
            self.problem(where, "lmdb-stat", f"cannot stat {path / 'data.mdb'}: {exc}")
            return None
        psize = fig.page_size
        if psize < 512 or psize > 65536 or psize & (psize - 1):
            self.problem(where, "lmdb-stat", f"page size {psize} is not a power of two in 512..65536")
            return None
        if fig.pages_used < 2:
            self.problem(where, "lmdb-stat", f"last page number {fig.pages_used - 1} leaves no room for the meta pages")
            return None
        cut = missing_roots(path / "data.mdb", psize)
        if cut is not None:
            # Pages past the end of a mapped file raise SIGBUS when touched: stop here.
            self.problem(where, "lmdb-stat", f"{cut}; its pages were not walked")
            return None
        if fig.bytes_used > fig.map_size:
            self.problem(where, "lmdb-stat", f"{fig.bytes_used:,} bytes in use exceed the map of {fig.map_size:,}")
            return None
        if int(st["depth"]) > MAX_DEPTH:
            self.problem(where, "lmdb-stat", f"main database depth {st['depth']} exceeds LMDB's limit {MAX_DEPTH}")
            return None
        return fig

    def check_db_stat(self, where: str, name: str, st: Mapping[str, Any]) -> int:
        """Pages of one database (checks its depth); reports and returns -1 when impossible."""
        if int(st["depth"]) > MAX_DEPTH:
            self.problem(where, "lmdb-stat", f"database {name!r} depth {st['depth']} exceeds LMDB's limit {MAX_DEPTH}")
            return -1
        if int(st["entries"]) and not int(st["leaf_pages"]):
            self.problem(where, "lmdb-stat", f"database {name!r} claims {st['entries']} entries on no leaf page")
            return -1
        return int(st["branch_pages"]) + int(st["leaf_pages"]) + int(st["overflow_pages"])

    def walk(
        self, where: str, name: str, txn: lmdb.Transaction, db: Any, visit: Callable[[bytes, bytes], None] | None
    ) -> int:
        """Walk every entry of ``db`` (keys and values read, so every page is touched); returns entries seen."""
        n = 0
        expected = int(txn.stat(db)["entries"])
        try:
            cursor = txn.cursor(db=db)
            for k, v in cursor.iternext(keys=True, values=True):
                n += 1
                if visit is not None:
                    visit(k, v)  # type: ignore[arg-type]  # bytes: the cursor is not in buffers mode
        except lmdb.Error as exc:
            self.problem(where, "lmdb-walk", f"walking database {name!r} failed after {n:,} entries: {exc}")
            return n
        if n != expected:
            self.problem(
                where, "lmdb-count", f"database {name!r} header counts {expected:,} entries; the walk saw {n:,}"
            )
        return n

    def check_pages(
        self, where: str, env: lmdb.Environment, txn: lmdb.Transaction, main: Any, dbs: dict[bytes, Any]
    ) -> None:
        # Read inside the transaction: a writer in another process may have committed since the
        # environment was opened, and pages in use only grow, so this bounds the snapshot's pages.
        pages_used = int(env.info()["last_pgno"]) + 1
        pages = self.check_db_stat(where, "(main)", txn.stat(main))
        for name, db in dbs.items():
            got = self.check_db_stat(where, name.decode(), txn.stat(db))
            if got < 0 or pages < 0:
                pages = -1
            else:
                pages += got
        if pages >= 0 and pages + 2 > pages_used:
            self.problem(
                where,
                "lmdb-stat",
                f"the databases' headers count {pages:,} pages (+2 meta pages) but only {pages_used:,} are in use",
            )

    # ---------------------------------------------------------------- meta

    def read_meta(self) -> tuple[dict[str, Any], list[str], int]:
        root = self.root
        if not root.exists():
            raise StoreFormatError(f"{root} does not exist")
        if not root.is_dir():
            raise StoreFormatError(f"{root} is a file, not a dedupstore directory")
        meta_dir = root / "meta"
        if not meta_dir.is_dir():
            raise StoreFormatError(f"{root} is not a dedupstore store (no meta/)")
        try:
            env = _open_readonly(meta_dir, 0)
        except lmdb.Error as exc:
            raise StoreFormatError(f"{meta_dir} is not a valid LMDB environment (corrupt or foreign): {exc}") from None
        try:
            fig = self.env_figures("meta", meta_dir, env)
            if fig is None:
                raise StoreFormatError(f"{meta_dir} cannot be read: {self.problems[-1].message}")
            main = env.open_db()
            with env.begin() as txn:
                raw = txn.get(FORMAT_KEY)
                if raw is None:
                    if txn.cursor().first():
                        raise StoreFormatError(f"{meta_dir} holds an LMDB environment that is not a dedupstore's")
                    raise StoreFormatError(f"{root} is not an initialised dedupstore store")
                data = parse_format(raw, str(root))
                entries: dict[bytes, bytes] = {}
                self.walk("meta", "(main)", txn, main, lambda k, v: entries.__setitem__(k, v))
                self.check_pages("meta", env, txn, main, {})
        finally:
            env.close()
        names = self.check_registry(entries)
        partitions = data.get("partitions")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= 256:
            raise StoreFormatError(f"{root}: the format record's partition count {partitions!r} is not 1..256")
        return data, names, partitions

    def check_registry(self, entries: dict[bytes, bytes]) -> list[str]:
        configs: dict[str, NamespaceConfig] = {}
        ids: dict[int, str] = {}
        for k, v in entries.items():
            if k == FORMAT_KEY:
                continue
            if k.startswith(NSID_KEY):
                suffix = k[len(NSID_KEY) :]
                if len(suffix) != 2:
                    self.problem("meta", "meta-key", f"namespace id key {k!r} is not nsid/ + 2 bytes")
                    continue
                ids[int.from_bytes(suffix, "big")] = _text(v)
            elif k.startswith(NS_KEY):
                name = _text(k[len(NS_KEY) :])
                try:
                    cfg = NamespaceConfig.from_json(v)
                    if cfg.name != name:
                        raise ValueError(f"its name is {cfg.name!r}")
                    if not 1 <= cfg.id <= 65535 or cfg.generation_us <= 0:
                        raise ValueError(f"id {cfg.id} or generation length {cfg.generation_us} us is out of range")
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    self.problem("meta", "namespace-config", f"namespace {name!r}: config does not parse: {exc}")
                    continue
                configs[name] = cfg
            else:
                self.problem("meta", "meta-key", f"unexpected key {k!r} in the meta environment")
        for name, cfg in configs.items():
            owner = ids.get(cfg.id)
            if owner != name:
                self.problem(
                    "meta",
                    "namespace-config",
                    f"namespace {name!r} has id {cfg.id} but nsid/{cfg.id} names {owner!r}",
                )
            else:
                self.ns_by_id[cfg.id] = cfg
        for ns_id, owner in ids.items():
            if owner not in configs:
                self.problem("meta", "namespace-config", f"nsid/{ns_id} names {owner!r}, which has no config")
        return sorted(configs)

    # ---------------------------------------------------------------- partitions

    def check_partition_dirs(self, partitions: int) -> None:
        for child in sorted(self.root.iterdir()):
            name = child.name
            if len(name) >= 4 and name[0] == "p" and name[1:].isdigit() and int(name[1:]) >= partitions:
                self.problem(
                    name,
                    "partition-extra",
                    f"{child} is beyond the store's {partitions} partitions (p000..p{partitions - 1:03d})",
                )

    def window_entry(self, where: str, raw: bytes) -> None:
        # A process's write-behind window: open while it lives, and
        # replayed by the next writer or open after it died (dedupstore/window.py).
        try:
            owner = Owner.unpack(raw)
        except StoreFormatError as exc:
            self.problem(where, "write-behind", str(exc))
            return
        if owner.boot == checkpoint.boot_id() and not (self.root / WLOG_DIR / owner.name).is_file():
            self.problem(
                where, "write-behind",
                f"the write-behind entry names {WLOG_DIR}/{owner.name}, which is missing: the writes a "
                f"process acknowledged and had not yet applied are gone, and opens refuse to write the partition",
            )

    def open_partition(self, index: int, store_id: str) -> tuple[lmdb.Environment, EnvFigures, dict[bytes, Any]] | None:
        path = partition_dir(self.root, index)
        where = path.name
        if not path.is_dir():
            self.problem(where, "partition-missing", f"{path} does not exist: this partition's records are gone")
            return None
        rec = read_record(path)
        jdir = self.root / JOURNAL_DIR
        replay_due = (
            rec is not None
            and rec.boot != checkpoint.boot_id()
            and jdir.is_dir()
            and any(not seg.name.startswith(".") for seg in jdir.iterdir())
        )
        if rollback_due(path, rec) or replay_due:
            assert rec is not None
            # The newest meta page may name pages the crash never let reach
            # the disk: walking it could only report damage open() will undo.
            self.problem(
                where, "recovery-pending",
                f"the machine restarted since this partition's last checkpoint: the next open rolls it back to "
                f"txn {rec.txnid} and replays the sync-mode journal after it; its pages were not walked. Open "
                f"the store once, then verify again",
            )
            return None
        try:
            env = _open_readonly(path, 4)
        except lmdb.Error as exc:
            self.problem(where, "partition-open", f"{path} is not a valid LMDB environment: {exc}")
            return None
        try:
            fig = self.env_figures(where, path, env)
            if fig is None:
                env.close()
                return None
            dbs = {}
            for name in PARTITION_DBS:
                try:
                    dbs[name] = env.open_db(name, create=False)
                except lmdb.Error as exc:
                    self.problem(where, "partition-open", f"named database {name.decode()!r} cannot be opened: {exc}")
            if len(dbs) != len(PARTITION_DBS):
                env.close()
                return None
            with env.begin() as txn:
                raw = txn.get(FORMAT_KEY, db=dbs[b"meta"])
            # A partition that is not this store's is not walked: its records would only repeat that.
            if raw is None:
                self.problem(where, "partition-format", f"{path} has no format record; its records were not walked")
                env.close()
                return None
            try:
                data = parse_format(raw, str(path))
            except StoreFormatError as exc:
                self.problem(where, "partition-format", f"{exc}; its records were not walked")
                env.close()
                return None
            if data.get("store_id") != store_id or data.get("partition") != index:
                self.problem(
                    where,
                    "partition-format",
                    f"{path} belongs to store {data.get('store_id')} partition {data.get('partition')}, "
                    f"not to this store ({store_id}) partition {index}; its records were not walked",
                )
                env.close()
                return None
        except lmdb.Error as exc:
            self.problem(where, "partition-open", f"{path}: {exc}")
            env.close()
            return None
        return env, fig, dbs

    def check_partition(
        self,
        index: int,
        partitions: int,
        env: lmdb.Environment,
        fig: EnvFigures,
        dbs: dict[bytes, Any],
        hasher: _native.Hasher,
    ) -> PartitionReport:
        where = partition_dir(self.root, index).name
        report = PartitionReport(index, opened=True, lmdb=fig)
        records_db, pending_db, meta_db = dbs[b"records"], dbs[b"pending"], dbs[b"meta"]
        main = env.open_db()
        with env.begin() as txn:
            self.check_pages(where, env, txn, main, dbs)

            def main_entry(k: bytes, v: bytes) -> None:
                if k not in PARTITION_DBS:
                    self.problem(where, "meta-key", f"unexpected key {k!r} in the main database")

            self.walk(where, "(main)", txn, main, main_entry)

            # Partition meta: the format record, then F/O/E/G + namespace id,
            # and B + namespace id + generation for persisted filters.
            stored_oldest: dict[int, int] = {}
            sizes = {b"F": 8, b"O": 4, b"E": 8, b"G": 9}
            tag_of_store = _native.BloomFilter.hasher_tag(hasher)

            def meta_entry(k: bytes, v: bytes) -> None:
                if k == FORMAT_KEY:
                    return
                if k == W_KEY:
                    self.window_entry(where, v)
                    return
                tag, rest = k[:1], k[1:]
                if tag == b"B" and len(rest) == 6:
                    try:
                        _native.BloomFilter.from_bytes(v, expected_tag=tag_of_store)
                    except StoreFormatError as exc:
                        self.problem(where, "bloom", f"filter {k!r}: {exc} (it is rebuilt at the next refresh)")
                    return
                if tag not in sizes or len(rest) != 2:
                    self.problem(where, "meta-key", f"unexpected key {k!r} in the partition meta database")
                    return
                ns_id = int.from_bytes(rest, "big")
                if ns_id not in self.ns_by_id:
                    self.problem(where, "meta-key", f"meta key {k!r} names unregistered namespace id {ns_id}")
                if len(v) != sizes[tag]:
                    self.problem(where, "meta-key", f"meta key {k!r} holds {len(v)} bytes, not {sizes[tag]}")
                    return
                if tag == b"O":
                    stored_oldest[ns_id] = int.from_bytes(v, "big")

            self.walk(where, "meta", txn, meta_db, meta_entry)

            oldest: dict[int, int] = {}
            for ns_id, cfg in self.ns_by_id.items():
                oldest[ns_id] = stored_oldest.get(ns_id, int(cfg.created * 1_000_000) // cfg.generation_us)

            get = txn.get
            split = _native.split_record_key
            split_unresolved = _native.split_unresolved_key
            decode = _native.decode_record
            route = hasher.route
            state_pending = _native.STATE_PENDING
            max_key = _native.MAX_KEY_BYTES
            label = self.label
            problem = self.problem
            newest: dict[int, int] = {}  # namespace id -> newest generation holding a record

            def common(at: str, name: str, ns_id: int, key: bytes, v: bytes, kind: str) -> tuple[Any, ...] | None:
                """Checks every record gets wherever it lives; its decoded form, or None."""
                if len(key) > max_key:
                    problem(where, kind, f"{at}: business key is {len(key)} bytes, over {max_key}", name)
                try:
                    rec = decode(v)
                except Exception as exc:  # StoreFormatError: version, state, flags or lengths
                    problem(where, "record-decode", f"{at}: {exc}", name)
                    return None
                if ns_id not in self.ns_by_id:
                    problem(where, "record-namespace", f"{at}: namespace id {ns_id} is not registered", name)
                elif len(key) <= max_key:
                    routed = route(ns_id.to_bytes(2, "big"), key, partitions)
                    if routed != index:
                        problem(
                            where, "record-partition", f"{at}: the key routes to partition {routed}, not {index}", name
                        )
                return rec

            def record(k: bytes, v: bytes) -> None:
                report.records += 1
                self.done += 1
                if self.progress is not None and self.done % PROGRESS_EVERY == 0:
                    self.progress(self.done, self.expected)
                try:
                    ns_id, gen, key = split(k)
                except Exception as exc:  # StoreFormatError from the native splitter
                    problem(where, "record-key", f"record key {k!r}: {exc}", _text(k))
                    return
                name = label(ns_id, key)
                at = f"{name} (generation {gen})"
                rec = common(at, name, ns_id, key, v, "record-key")
                if rec is None:
                    return
                if rec[0] == state_pending:
                    report.pending_records += 1
                    problem(
                        where,
                        "record-unresolved",
                        f"{at}: PENDING in a generation (unresolved records live in the pending database)",
                        name,
                    )
                else:
                    report.completed_records += 1
                if ns_id in self.ns_by_id:
                    newest[ns_id] = max(newest.get(ns_id, gen), gen)
                    if gen < oldest[ns_id]:
                        problem(
                            where,
                            "record-generation",
                            f"{at}: below the partition's oldest generation {oldest[ns_id]}, so lookups never probe it",
                            name,
                        )

            self.walk(where, "records", txn, records_db, record)

            def pending_entry(k: bytes, v: bytes) -> None:
                report.records += 1
                self.done += 1
                try:
                    ns_id, key = split_unresolved(k)
                except Exception as exc:  # StoreFormatError from the native splitter
                    problem(where, "pending-entry", f"pending key {k!r}: {exc}", _text(k))
                    return
                name = label(ns_id, key)
                at = f"{name} (pending)"
                rec = common(at, name, ns_id, key, v, "pending-entry")
                if rec is None:
                    return
                if rec[0] == state_pending:
                    report.pending_records += 1
                else:
                    report.completed_records += 1
                    problem(
                        where,
                        "pending-completed",
                        f"{at}: COMPLETED in the pending database (completed records live in a generation)",
                        name,
                    )
                if ns_id not in self.ns_by_id:
                    return
                # Few records are unresolved: probing every live generation for each is cheap.
                for gen in range(oldest[ns_id], newest.get(ns_id, -1) + 1):
                    if get(_native.record_key(k[:2], gen, key), None, records_db) is not None:
                        problem(
                            where,
                            "pending-duplicate",
                            f"{at}: also in generation {gen}, whose record lookups find first",
                            name,
                        )
                        break

            self.walk(where, "pending", txn, pending_db, pending_entry)
        return report


def verify_store(
    path: str | Path,
    *,
    max_listed: int = MAX_LISTED,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Check the store at ``path`` (read-only) and return what was found.

    Raises :class:`StoreFormatError` when ``path`` is not a store this code
    reads (missing, foreign, another format version): there is nothing to
    check then. Everything else wrong is a :class:`Problem` in the report
    (the first ``max_listed`` listed, all counted). ``progress(done, total)`` is
    called every 10,000 records walked and once at the end.
    """
    root = Path(path)
    v = _Verifier(root, max_listed, progress)
    if root.is_dir():
        # LMDB forbids two handles on one environment in one process: closing the
        # second would drop the first one's locks.
        with _open_lock:
            other = _open_stores.get(same_file_key(root))
            if other is not None and other() is not None:
                raise StoreAlreadyOpenError(f"{root} is open in this process; close that DedupStore before verifying")
    data, names, partitions = v.read_meta()
    report = VerifyReport(
        path=str(root),
        store_id=str(data.get("store_id")),
        format_version=int(data["format_version"]),
        partitions=partitions,
        namespaces=names,
    )
    try:
        hasher = _native.Hasher(bytes.fromhex(data["secret"]))
    except (KeyError, TypeError, ValueError):
        raise StoreFormatError(f"{root}: the format record's secret is not 32 hex digits") from None
    v.check_partition_dirs(partitions)
    opened: list[tuple[int, lmdb.Environment, EnvFigures, dict[bytes, Any]]] = []
    try:
        for index in range(partitions):
            got = v.open_partition(index, report.store_id)
            if got is None:
                report.partition_reports.append(PartitionReport(index))
            else:
                opened.append((index, *got))
        for _, env, _, dbs in opened:
            with env.begin() as txn:
                v.expected += sum(int(txn.stat(dbs[name])["entries"]) for name in (b"records", b"pending"))
        for index, env, fig, dbs in opened:
            report.partition_reports.append(v.check_partition(index, partitions, env, fig, dbs, hasher))
    finally:
        for _, env, _, _ in opened:
            env.close()
    report.partition_reports.sort(key=lambda p: p.partition)
    if progress is not None:
        progress(v.done, v.expected)
    report.problems = v.problems
    report.problems_total = v.total
    report.problem_kinds = dict(sorted(v.kinds.items()))
    return report
