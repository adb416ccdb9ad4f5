"""The operator verbs of the ``dedupstore`` command line: ``inspect``, ``stats``, ``unresolved``, ``verify``, ``evict``.

Each runs in-process against a store built here with a fake clock; the CLI reads it with the same clock
(``dedupstore.cli.inspect.CLOCK``), so every time and age printed is exact. ``verify`` is tested against
damage written on purpose with py-lmdb, byte by byte as docs/format.md lays it out.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from _cli import run, run_json
from conftest import FakeClock

from dedupstore import DedupStore, Record, _native
from dedupstore.cli import inspect as inspect_cli
from dedupstore.verify import PROBLEM_KINDS, verify_store

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
RECORD_KEYS = {
    "namespace", "key", "state", "intent_digest", "first_seen", "lease_expires", "completed_at", "token",
    "attempts", "event_time", "event_id", "claimant", "outcome", "other_events", "generation",
}  # fmt: skip
VERIFY_KEYS = {
    "command", "path", "store_id", "format_version", "partitions", "namespaces", "records", "pending_records",
    "completed_records", "bytes_used", "partition_stats", "problems_total",
    "problem_kinds", "problems", "ok",
}  # fmt: skip


def rows(out: str) -> dict[str, str]:
    """The label/value table as label -> value (three or more spaces separate them)."""
    table = {}
    for line in out.splitlines():
        if not line.strip():
            break
        label, sep, value = line.partition("   ")
        assert sep, f"not a table row: {line!r}"
        table[label.strip()] = value.strip()
    return table


def columns(out: str, first: str) -> list[list[str]]:
    """The column table whose header's first cell is ``first``, as rows of cells (split on 3+ spaces)."""

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip().split("   ") if cell.strip()]

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if cells(line)[:1] == [first])
    table = []
    for line in lines[start:]:
        if not line.strip():
            break
        table.append(cells(line))
    return table


def one_line_error(err: str, kind: str = "error") -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"dedupstore: {kind}: "), err
    return lines[0]


@pytest.fixture
def cli_clock(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The fake clock, also used by the CLI when it opens a store."""
    monkeypatch.setattr(inspect_cli, "CLOCK", clock)
    return clock


@pytest.fixture
def built(tmp_path: Path, cli_clock: FakeClock) -> Path:
    """A closed two-partition store: one COMPLETED record of each kind, one UNKNOWN, one PENDING.

    Built at T0; the clock is then T0 + 60 s, so order-2's 30 s lease expired 30 s ago and order-3's
    runs for 30 s more.
    """
    path = tmp_path / "store"
    with DedupStore.open(path, partitions=2, clock=cli_clock, eviction_rate=0) as store:
        store.ensure_namespace("orders", horizon="1h", lease="30s")
        store.ensure_namespace("payments", horizon="2h")
        res = store.claim(
            "orders", "order-1", {"amount": 100}, event_id="evt-1", claimant="worker-a", event_time=T0 - 2
        )
        store.complete("orders", "order-1", res.token, b'{"charged": 100}')
        store.claim("orders", "order-2", claimant="worker-b", event_id="evt-2")
        res = store.claim("orders", b"\xff\x00bin")
        store.complete("orders", b"\xff\x00bin", res.token, b"\x00\x01\xfe")
        res = store.claim("orders", "big")
        store.complete("orders", "big", res.token, "é" * 150)  # 300 bytes of UTF-8
        cli_clock.advance(60)
        store.claim("orders", "order-3", claimant="worker-c", event_id="evt-3")
    return path


# --- inspect -----------------------------------------------------------------------------------------


def test_inspect_completed_record(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "inspect", "--path", str(built), "orders", "order-1")
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["namespace"] == "orders"
    assert table["key"] == '"order-1"'
    assert table["state"].startswith("COMPLETED")
    assert len(table["intent digest"]) == 32 and int(table["intent digest"], 16) >= 0
    assert table["first seen"] == "2023-11-14T22:13:20.000Z (1m ago)"
    assert table["completed"] == "2023-11-14T22:13:20.000Z (1m ago)"
    assert table["event time"] == "2023-11-14T22:13:18.000Z (1m 2s ago)"
    assert table["event id"] == '"evt-1"'
    assert table["claimant"] == '"worker-a"'
    assert table["attempts"] == "1 (leases granted)"
    assert table["other events"].startswith("0 ")
    assert table["outcome"] == '"{\\"charged\\": 100}" (16 bytes, UTF-8)'
    assert int(table["token"]) > 0
    assert table["generation"] == str(int(T0 * 1e6) // int(450 * 1e6))  # 1h / 8 = 7.5 min generations
    assert "lease expires" not in table


def test_inspect_unknown_and_pending_records(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, _ = run(capsys, "inspect", "--path", str(built), "orders", "order-2")
    table = rows(out)
    assert code == 0
    assert table["state"].startswith("UNKNOWN")
    assert table["lease expires"] == "2023-11-14T22:13:50.000Z (30 s ago)"
    assert table["intent digest"].startswith("none")
    assert table["event time"] == "none"
    assert "outcome" not in table and "completed" not in table

    code, out, _ = run(capsys, "inspect", "--path", str(built), "orders", "order-3")
    table = rows(out)
    assert table["state"].startswith("PENDING")
    assert table["lease expires"] == "2023-11-14T22:14:50.000Z (in 30 s)"
    assert table["first seen"] == "2023-11-14T22:14:20.000Z (now)"


def test_inspect_binary_key_and_outcome(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "inspect", "--path", str(built), "--hex", "orders", "0xff0062696e")
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["key"] == "0xff0062696e"
    assert table["outcome"] == "0x0001fe (3 bytes, binary)"
    # The same key without 0x.
    assert run(capsys, "inspect", "--path", str(built), "--hex", "orders", "FF0062696E")[0] == 0


def test_inspect_truncates_a_long_outcome(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    _, out, _ = run(capsys, "inspect", "--path", str(built), "orders", "big")
    outcome = rows(out)["outcome"]
    assert outcome == '"' + "é" * 100 + '"... (truncated: first 200 of 300 bytes, UTF-8; --json prints it whole)'
    document = run_json(capsys, "inspect", "--path", str(built), "orders", "big")
    assert document["outcome"] == "é" * 150


def test_inspect_json_is_the_record(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    document = run_json(capsys, "inspect", "--path", str(built), "orders", "order-1")
    assert set(document) == RECORD_KEYS | {"command", "found", "read_at"}
    assert set(Record.__dataclass_fields__) == RECORD_KEYS  # the schema is Record.to_dict()
    assert (document["command"], document["found"], document["read_at"]) == ("inspect", True, T0 + 60)
    assert document["state"] == "COMPLETED"
    assert document["first_seen"] == T0 and document["completed_at"] == T0 and document["lease_expires"] is None
    assert document["event_time"] == T0 - 2
    assert (document["event_id"], document["claimant"]) == ("evt-1", "worker-a")
    assert document["outcome"] == '{"charged": 100}'
    assert len(document["intent_digest"]) == 32

    document = run_json(capsys, "inspect", "--path", str(built), "--hex", "orders", "ff0062696e")
    assert (document["key"], document["outcome"]) == ("0xff0062696e", "0x0001fe")


def test_inspect_not_found_exits_1(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "inspect", "--path", str(built), "orders", "nope")
    assert (code, out) == (1, "")
    assert one_line_error(err, "not found") == 'dedupstore: not found: no record for orders/"nope"'
    document = run_json(capsys, "inspect", "--path", str(built), "orders", "nope", expect=1)
    assert document == {"command": "inspect", "found": False, "read_at": T0 + 60, "namespace": "orders", "key": "nope"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "orders"], "the following arguments are required"),
        (["inspect", "orders", "k", "--json"], "the following arguments are required: --path"),
        (["inspect", "--path", "{store}", "nosuch", "k"], "namespace 'nosuch' is not registered"),
        (["inspect", "--path", "{store}", "Bad Name", "k"], "namespace must match"),
        (["inspect", "--path", "{store}", "--hex", "orders", "0xzz"], "--hex: KEY must be hex digits"),
        (["inspect", "--path", "{store}", "orders", "x" * 401], "key must be 1..400 bytes"),
        (["unresolved", "--path", "{store}", "orders", "--limit", "-1"], "--limit must be a whole number >= 0"),
        (["unresolved", "--path", "{store}", "orders", "--limit", "ten"], "--limit must be a whole number"),
        (["unresolved", "--path", "{store}", "nosuch"], "namespace 'nosuch' is not registered"),
        (["evict", "--path", "{store}", "--budget", "0"], "--budget must be a whole number >= 1"),
        (["evict", "--path", "{store}", "--budget", "1.5"], "--budget must be a whole number >= 1"),
        (["stats", "--path", "{store}", "--bogus"], "unrecognized arguments: --bogus"),
        (["verify"], "the following arguments are required: --path"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], built: Path, argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *(a.replace("{store}", str(built)) for a in argv))
    assert (code, out) == (2, "")
    assert message in one_line_error(err)


@pytest.mark.parametrize(
    "verb", [["inspect", "orders", "k"], ["stats"], ["unresolved", "orders"], ["verify"], ["evict"]]
)
def test_missing_or_foreign_store_is_exit_2_and_nothing_is_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, verb: list[str]
) -> None:
    missing = tmp_path / "missing"
    code, out, err = run(capsys, verb[0], "--path", str(missing), *verb[1:])
    assert (code, out) == (2, "")
    assert str(missing) in one_line_error(err) and "does not exist" in err
    assert not missing.exists()

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a store")
    code, out, err = run(capsys, verb[0], "--path", str(foreign), *verb[1:])
    assert (code, out) == (2, "")
    assert "is not a dedupstore store (no meta/)" in one_line_error(err)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_a_corrupt_record_met_by_a_read_is_one_line_and_exit_5(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    rewrite_record(built, b"order-1", lambda v: b"\x09" + v[1:])
    code, out, err = run(capsys, "inspect", "--path", str(built), "orders", "order-1")
    assert (code, out) == (5, "")
    line = one_line_error(err)
    assert "record format version 9" in line and "dedupstore verify" in line


def test_store_open_in_this_process_is_refused(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    with DedupStore.open(built, create=False, eviction_rate=0):
        for argv in (["stats"], ["verify"]):
            code, out, err = run(capsys, argv[0], "--path", str(built))
            assert (code, out) == (2, "")
            assert "open in this process" in one_line_error(err)


# --- stats -------------------------------------------------------------------------------------------


def test_stats_tables(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "stats", "--path", str(built))
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["path"] == str(built)
    assert table["format"] == "version 2"
    assert table["partitions"] == "2"
    assert table["namespaces"] == "2"
    assert table["records"] == "5 (2 unresolved)"
    parts = columns(out, "partition")
    assert parts[0] == ["partition", "records", "pending", "bytes used"]
    assert [p[0] for p in parts[1:]] == ["0", "1"]
    assert sum(int(p[1]) for p in parts[1:]) == 5 and sum(int(p[2]) for p in parts[1:]) == 2
    spaces = columns(out, "namespace")
    assert spaces[0] == ["namespace", "horizon", "lease", "unresolved", "evicted", "eviction lag", "frontier"]
    assert spaces[1] == ["orders", "1h", "30s", "2", "0", "0 (keeping up)", "2023-11-14T22:13:20.000Z (1m ago)"]
    assert spaces[2][:4] == ["payments", "2h", "30s", "0"]


def test_stats_json(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    document = run_json(capsys, "stats", "--path", str(built))
    assert {"command", "read_at", "path", "format_version", "partitions", "durability", "verdicts",
            "duplicates_same_event", "repeats_other_event", "bytes_used", "partition_stats",
            "namespaces"} <= set(document)  # fmt: skip
    assert (document["command"], document["read_at"], document["format_version"]) == ("stats", T0 + 60, 2)
    assert [p["partition"] for p in document["partition_stats"]] == [0, 1]
    assert sum(p["records"] for p in document["partition_stats"]) == 5
    orders = document["namespaces"]["orders"]
    assert (orders["unresolved"], orders["evicted"], orders["frontier"]) == (2, 0, T0)
    assert orders["eviction_lag_seconds"] == 0 and orders["horizon"] == "1h"


def test_read_verbs_never_evict(capsys: pytest.CaptureFixture[str], built: Path, cli_clock: FakeClock) -> None:
    cli_clock.advance(86400)  # everything is far past its horizon
    for argv in (["stats"], ["unresolved", "orders"], ["inspect", "orders", "order-1"], ["verify"]):
        assert run(capsys, argv[0], "--path", str(built), *argv[1:])[0] == 0
    document = run_json(capsys, "stats", "--path", str(built))
    assert sum(p["records"] for p in document["partition_stats"]) == 5
    assert document["namespaces"]["orders"]["eviction_lag_seconds"] > 0


# --- unresolved --------------------------------------------------------------------------------------


def test_unresolved_table(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "unresolved", "--path", str(built), "orders")
    assert (code, err) == (0, "")
    table = columns(out, "key")
    assert table == [
        ["key", "state", "first seen", "lease", "attempts", "claimant", "event id"],
        ['"order-2"', "UNKNOWN", "1m ago", "expired 30 s ago", "1", '"worker-b"', '"evt-2"'],
        ['"order-3"', "PENDING", "0 ms ago", "in 30 s", "1", '"worker-c"', '"evt-3"'],
    ]
    assert out.splitlines()[-1] == (
        "2 unresolved (1 PENDING, 1 UNKNOWN); oldest first seen 2023-11-14T22:13:20.000Z (1m ago)"
    )


def test_unresolved_limit_and_json(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, _ = run(capsys, "unresolved", "--path", str(built), "orders", "--limit", "1")
    assert code == 0
    assert len(columns(out, "key")) == 2
    assert out.splitlines()[-1].endswith("showing the oldest 1 (--limit 0 lists all)")

    document = run_json(capsys, "unresolved", "--path", str(built), "orders", "--limit", "1")
    assert set(document) == {
        "command", "namespace", "read_at", "total", "pending", "unknown", "limit", "truncated", "records"
    }  # fmt: skip
    assert (document["total"], document["pending"], document["unknown"]) == (2, 1, 1)
    assert (document["limit"], document["truncated"]) == (1, True)
    assert [r["key"] for r in document["records"]] == ["order-2"]
    assert set(document["records"][0]) == RECORD_KEYS
    assert document["records"][0]["state"] == "UNKNOWN"

    document = run_json(capsys, "unresolved", "--path", str(built), "orders", "--limit", "0")
    assert [r["key"] for r in document["records"]] == ["order-2", "order-3"] and not document["truncated"]


def test_unresolved_fail_if_any(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "unresolved", "--path", str(built), "orders", "--fail-if-any")
    assert code == 4 and '"order-2"' in out
    assert one_line_error(err, "unresolved") == "dedupstore: unresolved: 2 unresolved record(s) in namespace 'orders'"

    code, out, err = run(capsys, "unresolved", "--path", str(built), "payments", "--fail-if-any")
    assert (code, err) == (0, "")
    assert out == "no unresolved records in namespace 'payments'\n"
    document = run_json(capsys, "unresolved", "--path", str(built), "payments", "--fail-if-any")
    assert (document["total"], document["records"]) == (0, [])


# --- evict -------------------------------------------------------------------------------------------


def test_evict_runs_now_and_reports_the_frontier(
    capsys: pytest.CaptureFixture[str], built: Path, cli_clock: FakeClock
) -> None:
    code, out, err = run(capsys, "evict", "--path", str(built))
    assert (code, err) == (0, "")
    assert rows(out)["deleted"].startswith("0 ") and "pinned" not in rows(out)

    cli_clock.advance(3600 + 450)  # the horizon plus one generation: the first generation is due
    document = run_json(capsys, "evict", "--path", str(built), "--budget", "1")
    assert document["budget"] == 1 and document["deleted"] == 1

    code, out, err = run(capsys, "evict", "--path", str(built))
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["budget"] == "everything due"
    spaces = columns(out, "namespace")
    assert spaces[0] == ["namespace", "evicted", "unresolved", "eviction lag", "frontier"]
    orders = dict(zip(spaces[0], spaces[1], strict=True))
    assert orders["evicted"] == "3"  # order-1, the binary key and big: all COMPLETED
    assert orders["unresolved"] == "2"  # order-2 and order-3: never evicted
    assert orders["frontier"] == "2023-11-14T22:15:00.000Z (1h 6m ago)"  # the end of the evicted generation

    document = run_json(capsys, "evict", "--path", str(built))
    assert set(document) == {"command", "read_at", "budget", "deleted", "namespaces"}
    assert (document["budget"], document["deleted"]) == (None, 0)
    assert set(document["namespaces"]["orders"]) == {"frontier", "evicted", "eviction_lag_seconds", "unresolved"}
    assert document["namespaces"]["orders"]["frontier"] == T0 + 100

    # The unresolved records survived, in no generation, and verify agrees with everything left.
    _, out, _ = run(capsys, "inspect", "--path", str(built), "orders", "order-2")
    assert rows(out)["generation"].startswith("none (unresolved")
    assert run(capsys, "verify", "--path", str(built))[0] == 0


# --- verify: a clean store ---------------------------------------------------------------------------


def test_verify_clean_store(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    code, out, err = run(capsys, "verify", "--path", str(built))
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["format"] == "version 2 (this dedupstore reads version 2)"
    assert table["partitions"] == "2 (2 opened and walked)"
    assert table["namespaces"] == "orders, payments"
    assert table["records"] == "5 (3 COMPLETED, 2 PENDING or UNKNOWN)"
    assert columns(out, "partition")[0] == [
        "partition",
        "records",
        "unresolved",
        "pages used",
        "page size",
        "data.mdb bytes",
    ]
    assert table["problems"] == "none"

    document = run_json(capsys, "verify", "--path", str(built))
    assert set(document) == VERIFY_KEYS
    assert document["ok"] is True and document["problems_total"] == 0 and document["problems"] == []
    assert (document["records"], document["pending_records"], document["partitions"]) == (5, 2, 2)
    assert sum(p["pending_records"] for p in document["partition_stats"]) == 2
    assert document["namespaces"] == ["orders", "payments"]
    for part in document["partition_stats"]:
        assert part["opened"] is True
        lm = part["lmdb"]
        assert lm["page_size"] == 4096 and lm["bytes_used"] == lm["pages_used"] * 4096 <= lm["file_bytes"]


def test_verify_reads_only(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    before = {p: p.read_bytes() for p in built.rglob("data.mdb")}
    assert run(capsys, "verify", "--path", str(built))[0] == 0
    assert {p: p.read_bytes() for p in built.rglob("data.mdb")} == before


# --- verify: damage written on purpose ---------------------------------------------------------------


@pytest.fixture
def raw(built: Path) -> Iterator[RawStore]:
    s = RawStore(built)
    try:
        yield s
    finally:
        s.close()


class RawStore:
    """The store's partitions opened with py-lmdb directly, to damage them (docs/format.md)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.envs = [lmdb.open(str(p), max_dbs=4) for p in sorted(root.glob("p[0-9][0-9][0-9]"))]

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []

    def dbs(self, index: int) -> tuple[lmdb.Environment, Any, Any, Any]:
        env = self.envs[index]
        return env, env.open_db(b"records"), env.open_db(b"pending"), env.open_db(b"meta")

    def find(self, key: bytes) -> tuple[int, str, bytes, bytes]:
        """(partition, database, LMDB key, value) of the record of ``key``: a
        completed one is in ``records`` (after a 6-byte prefix), an unresolved
        one in ``pending`` (after a 2-byte prefix)."""
        for i in range(len(self.envs)):
            env, records, pending, _ = self.dbs(i)
            with env.begin() as txn:
                for name, db, skip in (("records", records, 6), ("pending", pending, 2)):
                    for k, v in txn.cursor(db=db):
                        if k[skip:] == key:
                            return i, name, k, v
        raise KeyError(key)


def rewrite_record(root: Path, key: bytes, change: Any) -> None:
    raw = RawStore(root)
    try:
        i, name, k, v = raw.find(key)
        env = raw.envs[i]
        with env.begin(write=True) as txn:
            txn.put(k, change(v), db=env.open_db(name.encode(), txn=txn))
    finally:
        raw.close()


def verify_json(capsys: pytest.CaptureFixture[str], root: Path) -> dict[str, Any]:
    code, out, err = run(capsys, "verify", "--path", str(root), "--json")
    assert code == 5, err
    line = one_line_error(err, "verify failed")
    document = json.loads(out)
    assert document["ok"] is False and document["problems_total"] >= 1
    assert line.startswith(f"dedupstore: verify failed: {document['problems_total']} problem(s) in {root}")
    for problem in document["problems"]:
        assert set(problem) == {"where", "kind", "key", "message"}
        assert problem["kind"] in PROBLEM_KINDS
    return document


def kinds(document: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(p["where"], p["kind"], p["key"]) for p in document["problems"]]


def test_verify_bad_record_version(capsys: pytest.CaptureFixture[str], built: Path, raw: RawStore) -> None:
    i, _, k, v = raw.find(b"order-1")
    env, records, _, _ = raw.dbs(i)
    with env.begin(write=True) as txn:
        txn.put(k, b"\x07" + v[1:], db=records)
    raw.close()
    document = verify_json(capsys, built)
    assert kinds(document) == [(f"p{i:03d}", "record-decode", "orders/order-1")]
    assert "record format version 7" in document["problems"][0]["message"]
    assert document["problem_kinds"] == {"record-decode": 1}

    code, out, err = run(capsys, "verify", "--path", str(built))
    assert code == 5
    assert rows(out)["problems"] == "1"
    problems = columns(out, "where")
    assert problems[0] == ["where", "problem", "detail"]
    assert problems[1][:2] == [f"p{i:03d}", "record-decode"]
    assert one_line_error(err, "verify failed").endswith("record-decode 1")


def test_verify_unresolved_record_in_a_generation(
    capsys: pytest.CaptureFixture[str], built: Path, raw: RawStore
) -> None:
    i, name, k, v = raw.find(b"order-3")
    _, _, k1, _ = raw.find(b"order-1")
    assert name == "pending"
    env, records, pending, _ = raw.dbs(i)
    with env.begin(write=True) as txn:  # moved, as if a complete had moved it without completing it
        assert txn.delete(k, db=pending)
        txn.put(_native.record_key(k[:2], int.from_bytes(k1[2:6], "big"), b"order-3"), v, db=records)
    raw.close()
    document = verify_json(capsys, built)
    assert kinds(document) == [(f"p{i:03d}", "record-unresolved", "orders/order-3")]


def test_verify_records_in_the_wrong_database_or_in_both(
    capsys: pytest.CaptureFixture[str], built: Path, raw: RawStore
) -> None:
    i, _, k, v = raw.find(b"order-3")
    j, name, k1, v1 = raw.find(b"order-1")
    assert name == "records"
    env, records, _, _ = raw.dbs(i)
    with env.begin(write=True) as txn:  # order-3 left where it is, and also in a generation
        txn.put(_native.record_key(k[:2], int.from_bytes(k1[2:6], "big"), b"order-3"), v, db=records)
    env, _, pending, _ = raw.dbs(j)
    with env.begin(write=True) as txn:  # order-1, completed, also in the pending database
        txn.put(_native.unresolved_key(k1[:2], b"order-1"), v1, db=pending)
        txn.put(b"\x00", v1, db=pending)  # a key too short to hold a namespace id
    raw.close()
    found = set(kinds(verify_json(capsys, built)))
    assert found == {
        (f"p{i:03d}", "record-unresolved", "orders/order-3"),
        (f"p{i:03d}", "pending-duplicate", "orders/order-3"),
        (f"p{j:03d}", "pending-completed", "orders/order-1"),
        (f"p{j:03d}", "pending-duplicate", "orders/order-1"),
        (f"p{j:03d}", "pending-entry", "\x00"),
    }


def test_verify_invisible_records(capsys: pytest.CaptureFixture[str], built: Path, raw: RawStore) -> None:
    """Records lookups never find: below the oldest generation, in the wrong partition, unregistered namespace."""
    i, _, k, v = raw.find(b"order-1")
    env, records, _, _ = raw.dbs(i)
    gen = int.from_bytes(k[2:6], "big")
    other = 1 - i
    oenv, orecords, _, _ = raw.dbs(other)
    with env.begin(write=True) as txn:
        txn.put(_native.record_key(k[:2], gen - 5, b"old"), v, db=records)  # below the creation generation
        txn.put((77).to_bytes(2, "big") + k[2:6] + b"stray", v, db=records)  # namespace id 77: never registered
    with oenv.begin(write=True) as txn:
        txn.put(k, v, db=orecords)  # order-1 again, in the partition it does not route to
    raw.close()
    found = set(kinds(verify_json(capsys, built)))
    assert (f"p{i:03d}", "record-generation", "orders/old") in found
    assert (f"p{i:03d}", "record-namespace", "#77/stray") in found
    assert (f"p{other:03d}", "record-partition", "orders/order-1") in found


def test_verify_lists_20_problems_and_counts_all(
    capsys: pytest.CaptureFixture[str], built: Path, raw: RawStore
) -> None:
    i, _, _, v = raw.find(b"order-3")
    env, _, pending, _ = raw.dbs(i)
    with env.begin(write=True) as txn:
        for n in range(35):  # namespace id 77: never registered
            txn.put(_native.unresolved_key((77).to_bytes(2, "big"), f"ghost-{n:02d}".encode()), v, db=pending)
    raw.close()
    document = verify_json(capsys, built)
    assert document["problems_total"] == 35 and len(document["problems"]) == 20
    assert document["problem_kinds"] == {"record-namespace": 35}
    _, out, _ = run(capsys, "verify", "--path", str(built))
    assert out.splitlines()[-1] == "... and 15 more (35 in all; the first 20 are listed)"


def test_verify_missing_extra_and_foreign_partitions(
    capsys: pytest.CaptureFixture[str], built: Path, tmp_path: Path, cli_clock: FakeClock
) -> None:
    other = tmp_path / "other"
    with DedupStore.open(other, partitions=2, clock=cli_clock, eviction_rate=0) as store:
        store.ensure_namespace("orders")
    shutil.move(str(built / "p001"), str(built / "p002"))  # p001 missing, p002 extra
    shutil.copytree(other / "p000", built / "p001")  # ... then a stranger's partition in its place
    document = verify_json(capsys, built)
    found = {(p["where"], p["kind"]) for p in document["problems"]}
    assert found == {("p001", "partition-format"), ("p002", "partition-extra")}
    foreign = next(p for p in document["problems"] if p["kind"] == "partition-format")
    assert "belongs to store" in foreign["message"] and "its records were not walked" in foreign["message"]

    shutil.rmtree(built / "p001")
    document = verify_json(capsys, built)
    assert ("p001", "partition-missing") in {(p["where"], p["kind"]) for p in document["problems"]}
    assert document["partition_stats"][1]["opened"] is False
    assert not (built / "p001").exists()  # verify never creates what is missing


def test_verify_truncated_data_file_is_reported_not_a_crash(
    capsys: pytest.CaptureFixture[str], built: Path, cli_clock: FakeClock
) -> None:
    # Enough records that the file is larger than a few pages, then cut it: LMDB's meta page still
    # counts the pages, and touching a page past the end of a mapped file would be SIGBUS.
    with DedupStore.open(built, create=False, eviction_rate=0, clock=cli_clock) as store:
        keys = [f"filler-{n}" for n in range(3000)]
        res = store.claim_many("payments", keys)
        store.complete_many("payments", [(k, r.token, b"x" * 100) for k, r in zip(keys, res, strict=True)])
    data = built / "p000" / "data.mdb"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    document = verify_json(capsys, built)
    assert ("p000", "lmdb-stat") in {(p["where"], p["kind"]) for p in document["problems"]}
    assert "truncated" in document["problems"][0]["message"]
    assert document["partition_stats"][0]["opened"] is False and document["partition_stats"][1]["opened"] is True


def test_verify_unexpected_meta_keys(capsys: pytest.CaptureFixture[str], built: Path, raw: RawStore) -> None:
    env, _, _, meta = raw.dbs(0)
    with env.begin(write=True) as txn:
        txn.put(b"Zjunk", b"1", db=meta)
        txn.put(b"O\x00\x01", b"\x00\x00", db=meta)  # an oldest generation must be 4 bytes
    raw.close()
    found = [(p["where"], p["kind"]) for p in verify_json(capsys, built)["problems"]]
    assert found == [("p000", "meta-key"), ("p000", "meta-key")]


def test_verify_refuses_another_format_version(capsys: pytest.CaptureFixture[str], built: Path) -> None:
    env = lmdb.open(str(built / "meta"))
    with env.begin(write=True) as txn:
        data = json.loads(txn.get(b"format"))
        data["format_version"] = 1
        txn.put(b"format", json.dumps(data).encode())
    env.close()
    for verb in ("verify", "stats"):
        code, out, err = run(capsys, verb, "--path", str(built))
        assert (code, out) == (2, "")
        line = one_line_error(err)
        assert "format version 1" in line and "reads version 2" in line


def test_verify_library_report(built: Path) -> None:
    seen: list[tuple[int, int]] = []
    report = verify_store(built, progress=lambda done, total: seen.append((done, total)))
    assert report.ok and report.format_version == 2 and report.partitions == 2
    assert seen[-1] == (5, 5)  # called once at the end with the totals


def test_verify_progress_bar_only_on_a_terminal(
    capsys: pytest.CaptureFixture[str], built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dedupstore.cli import verify as verify_cli

    # Not a terminal (capsys): no bar, even for a long walk.
    progress = verify_cli._Progress()
    progress(10_000, 1_000_000)
    assert progress.bar is None
    # A terminal but a short walk: no bar either.
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    progress = verify_cli._Progress()
    progress(5, 5)
    assert progress.bar is None
    progress = verify_cli._Progress()
    progress(10_000, 1_000_000)
    assert progress.bar is not None and progress.bar.n == 10_000
    progress.close()
