"""`hil sessions --limit N` (issue 41): the newest N matches by start time, oldest of them first, and a last
line saying how many match in all - the lab's listing (`hil --store URL sessions`: the server sorts, cuts
and counts) and the local store's alike; `--json` lists every match unless --limit is given."""

from __future__ import annotations

import json

import pytest

from daq.lab.reader import LabReader
from daq.lab.search import Filters
from daq.store.reader import SessionReader
from tests.pg_cluster import throwaway_postgres
from tests.test_lab import hil, make_session, shared_lab
from tests.test_lab_faults import seeded_postgres_lab

RIG = "limit-rig"  # this file's sessions in the shared lab (which holds other tests' sessions too)


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    yield from shared_lab(request, tmp_path_factory)


@pytest.fixture(scope="module")
def eight(lab, tmp_path_factory):
    """A store of eight sessions of one rig, pushed to the lab newest first (so the lab's own order, the
    order they arrived in, is not their start order); the ids oldest first."""
    store = tmp_path_factory.mktemp("limit") / "hil.sqlite"
    ids = [make_session(store, 0.5, seed=s, name=RIG, status="complete" if s % 2 else "aborted")
           for s in range(8)]
    with SessionReader(store) as loc:
        by_start = sorted(ids, key=lambda s: (loc.get_session(s).started, s))
    assert by_start == ids  # made one after another
    res = hil("--store", str(store), "lab", "push", *reversed(ids), "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and res.output.count("pushed and verified") == 8, res.output
    return store, ids


def listed(where: str, *args: str, key: str | None = None) -> tuple[list[str], list[str]]:
    """The ids a table listing shows, in its order, and the lines after the table's rows."""
    res = hil("--store", where, "sessions", "--rig", RIG, *args, key=key)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[0] == "ID"
    rows = [ln for ln in lines[1:] if ln.split()[2:3] == [RIG]]
    return [r.split()[0] for r in rows], lines[1 + len(rows):]


def test_a_listing_shows_the_newest_matches_oldest_first_and_how_many_match_lab_and_local(lab, eight):
    store, ids = eight
    for where, key in ((lab.url, lab.key), (str(store), None)):
        shown, rest = listed(where, "--limit", "3", key=key)
        assert shown == ids[-3:]
        assert rest == ["3 of 8 sessions shown (newest); --limit 0 lists all"]
        shown, rest = listed(where, "--limit", "2", "--status", "complete", key=key)
        assert shown == [s for k, s in enumerate(ids) if k % 2][-2:]  # the newest of the matches
        assert rest == ["2 of 4 sessions shown (newest); --limit 0 lists all"]
        for every in (("--limit", "0"), ("--limit", "8"), ("--limit", "500"), ()):  # () = the default, 50
            shown, rest = listed(where, *every, key=key)
            assert (shown, rest) == (ids, [])


def test_json_lists_every_match_unless_a_limit_is_given(lab, eight):
    store, ids = eight
    for where, key in ((lab.url, lab.key), (str(store), None)):
        res = hil("--store", where, "sessions", "--json", "--rig", RIG, key=key)
        assert res.exit_code == 0 and [r["id"] for r in json.loads(res.stdout)] == ids
        assert res.stderr == ""
        res = hil("--store", where, "sessions", "--json", "--rig", RIG, "--limit", "3", key=key)
        assert res.exit_code == 0 and [r["id"] for r in json.loads(res.stdout)] == ids[-3:]
        assert res.stderr.strip() == "3 of 8 sessions shown (newest); --limit 0 lists all"
    local = hil("--store", str(store), "sessions", "--json", "--limit", "5").stdout
    remote = hil("--store", lab.url, "sessions", "--json", "--rig", RIG, "--limit", "5", key=lab.key).stdout
    assert json.loads(remote) == json.loads(local)  # the same rows, field for field


def test_a_bad_limit_is_one_line(lab, eight):
    store, _ = eight
    for bad in ("-1", "x", "2.5", ""):
        for where, key in ((lab.url, lab.key), (str(store), None)):
            res = hil("--store", where, "sessions", "--limit", bad, key=key)
            assert res.exit_code == 2 and "Traceback" not in res.output
            want = f"Error: --limit {bad!r}: give a whole number of sessions (0 lists all)"
            assert res.output.strip() == want


@pytest.mark.slow(reason="initdb, a PostgreSQL server and a Tiled server")
def test_a_postgresql_lab_sorts_cuts_and_counts_a_listing_in_two_requests(tmp_path):
    """1000 sessions (150 of rig a, 850 of rig b) started one second apart in key order but inserted
    newest first: the newest 50 of rig b are one page, sorted by the server, and one count."""
    with throwaway_postgres() as postgres:
        server = seeded_postgres_lab(tmp_path, postgres, n=1000, a=150, newest_first=True)
        try:
            keys = [f"{g:012x}" for g in range(1000)]
            with LabReader(server.url, server.key) as rem:
                asked: list[str] = []
                rem.root.context.http_client.event_hooks["request"].append(lambda r: asked.append(r.url.path))
                for filters, limit, hits, total, requests in (
                        (Filters(rig="b"), 50, keys[950:], 850, 2),      # a page and the count
                        (Filters(rig="b"), 400, keys[600:], 850, 3),     # 300 + 100, the count
                        (Filters(rig="a"), 200, keys[:150], 150, 1),     # a short page: it is all
                        (Filters(), 5, keys[995:], 1000, 2)):
                    asked.clear()
                    found, n = rem.newest_metadata(filters, limit)
                    assert [info.id for info, _ in found] == hits and n == total
                    assert asked == ["/api/v1/search/"] * requests
        finally:
            assert server.stop() == 0
