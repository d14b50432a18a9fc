"""People of the lab (issue 41) against a real `hil lab serve` (Tiled on 127.0.0.1, port 0): keys per person
made with `hil lab key add`, a viewer that reads and is refused every change in one line, an operator that
pushes, an admin that deletes and revokes, a revoked key refused, and the lab's record of who did what."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiled.client import from_uri

from daq.cli.main import main
from daq.lab.connect import from_client_error
from daq.lab.marks import replicas
from daq.lab.reader import LabReader
from daq.lab.settings import LabError
from tests.test_lab import LabServer, hil, make_session, shared_lab


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    yield from shared_lab(request, tmp_path_factory)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text and "validation error" not in text, text
    return lines[0]


def add_key(lab, name: str, role: str, folder: Path) -> tuple[str, str]:
    """`hil lab key add` with the admin's key from $HIL_LAB_KEY: (the key, what the command printed)."""
    out = folder / f"{name}.key"
    res = hil("lab", "key", "add", name, "--role", role, "--to", lab.url, "--key-file", str(out), key=lab.key)
    assert res.exit_code == 0, res.output
    return out.read_text().strip(), res.output


@pytest.fixture(scope="module")
def team(lab, tmp_path_factory):
    """A viewer, an operator and a second admin, each with a key of their own."""
    folder = tmp_path_factory.mktemp("keys")
    return {name: add_key(lab, name, role, folder) + (folder / f"{name}.key",)
            for name, role in (("vera", "viewer"), ("otto", "operator"), ("ada", "admin"))}


def test_keys_are_per_person_private_never_printed_and_listed_by_name_and_role(lab, team):
    for name, (key, printed, path) in team.items():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert key not in printed and key[8:16] not in printed  # at most the id Tiled names a key by
        role = {"vera": "viewer", "otto": "operator", "ada": "admin"}[name]
        assert one_line(printed) == f"{name} ({role}): key {key[:8]} written to {path}"
    assert len({key for key, _, _ in team.values()} | {lab.key}) == 4
    res = hil("lab", "key", "list", "--to", lab.url, "--json", key=lab.key)
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert {n: (rows[n]["role"], rows[n]["key_id"]) for n in team} == \
        {"vera": ("viewer", team["vera"][0][:8]), "otto": ("operator", team["otto"][0][:8]),
         "ada": ("admin", team["ada"][0][:8])}
    assert rows["admin"]["role"] == "admin"  # the key `hil lab serve` made on first start
    assert all(key not in res.output for key, _, _ in team.values())
    # only an admin manages keys; a name taken is refused; the key file is never overwritten
    for who in ("vera", "otto"):
        res = hil("lab", "key", "list", "--to", lab.url, key=team[who][0])
        assert res.exit_code == 1 and "needs an admin's key" in one_line(res.output)
    res = hil("lab", "key", "add", "vera", "--role", "admin", "--to", lab.url, "--key-file",
              str(team["vera"][2].with_name("again.key")), key=lab.key)
    assert res.exit_code == 1 and "already has a key" in one_line(res.output)
    assert not team["vera"][2].with_name("again.key").exists()
    res = hil("lab", "key", "add", "bob", "--role", "viewer", "--to", lab.url, "--key-file",
              str(team["vera"][2]), key=lab.key)
    assert res.exit_code == 1 and "exists" in one_line(res.output)
    assert team["vera"][2].read_text().strip() == team["vera"][0]


def test_a_viewer_reads_and_is_refused_a_push_a_metadata_write_and_a_delete_in_one_line(lab, team, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, seconds=2.0, seed=41)
    other = make_session(store, seconds=2.0, seed=42)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=team["otto"][0]).exit_code == 0
    viewer = team["vera"][0]
    shown = hil("--store", lab.url, "show", sid, "--json", key=viewer)
    assert shown.exit_code == 0 and json.loads(shown.output)["id"] == sid
    res = hil("--store", str(store), "lab", "push", other, "--to", lab.url, key=viewer)
    assert res.exit_code == 1
    assert one_line(res.output) == (f"Error: lab {lab.url}: vera's key is a viewer's (reads only): pushing "
                                    "needs an operator's key")
    assert other not in replicas(store) and other not in from_uri(lab.url, api_key=lab.key)
    with LabReader(lab.url, viewer) as rem:  # what `hil --store URL analyze` writes
        with pytest.raises(LabError) as refused:
            rem.record_analysis(sid, {"estimates": {"c2": 1.0}, "intervals": {}, "verdict": "fake"})
        assert "analysis" not in rem.session_metadata(sid)
    assert one_line(str(refused.value)) == (f"the analysis was not stored in the lab {lab.url}: vera's key "
                                            "is a viewer's (reads only); an operator's key stores it")
    node = from_uri(lab.url, api_key=viewer)[sid]
    for change in (lambda: node.update_metadata({"verdict": "fake"}), lambda: node.delete(recursive=True)):
        with pytest.raises(Exception) as exc:
            change()
        line = one_line(str(from_client_error(lab.url, exc.value)))
        assert line.startswith(f"lab {lab.url}: this key may not ") and ": that needs a" in line
    assert sid in from_uri(lab.url, api_key=lab.key)
    changes = [json.loads(line) for line in (lab.data / "changes.jsonl").read_text().splitlines()]
    refused = [c for c in changes if c["by"] == "vera"]  # the server recorded each refused try, by name
    assert {c["method"] for c in refused} >= {"PATCH", "DELETE"} and all(c["status"] == 401 for c in refused)


def test_an_operator_pushes_and_analyses_and_the_lab_records_who(lab, team, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, seconds=2.0, seed=43)
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=team["otto"][0])
    assert res.exit_code == 0 and "pushed and verified" in res.output
    with LabReader(lab.url, team["otto"][0]) as rem:
        rem.record_analysis(sid, {"estimates": {"c2": 1099.97}, "intervals": {}, "verdict": None})
        meta = rem.session_metadata(sid)
    assert meta["pushed_by"]["name"] == "otto" and meta["pushed_by"]["role"] == "operator"
    assert meta["pushed_by"]["key_id"] == team["otto"][0][:8]
    assert meta["analysed_by"]["name"] == "otto" and meta["analysis"]["estimates"] == {"c2": 1099.97}
    # the server's own record: every change, by the name kept with the key (no client can leave it out)
    changes = [json.loads(line) for line in (lab.data / "changes.jsonl").read_text().splitlines()]
    mine = [c for c in changes if sid in c["path"]]
    assert mine and {c["by"] for c in mine} == {"otto"}
    assert len({c["principal"] for c in mine}) == 1 and mine[0]["principal"]  # the principal Tiled found
    assert {"PUT", "PATCH"} & {c["method"] for c in mine}
    assert stat.S_IMODE((lab.data / "changes.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE((lab.data / "auth.db").stat().st_mode) == 0o600


def test_only_an_admin_deletes_and_revokes_and_a_revoked_key_is_refused(lab, team, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, seconds=2.0, seed=44)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=team["otto"][0]).exit_code == 0
    with pytest.raises(Exception) as exc:
        from_uri(lab.url, api_key=team["otto"][0])[sid].delete(recursive=True)
    assert one_line(str(from_client_error(lab.url, exc.value))) == (
        f"lab {lab.url}: this key may not delete (it lacks delete:node, delete:revision): that needs an "
        "admin's key")
    from_uri(lab.url, api_key=team["ada"][0])[sid].delete(recursive=True, external_only=False)  # admin: yes
    assert sid not in from_uri(lab.url, api_key=lab.key)
    # revoke by name, then by key id; the revoked keys open nothing, the others still work
    folder = tmp_path / "keys"
    folder.mkdir()
    bob, _ = add_key(lab, "bob", "operator", folder)
    res = hil("lab", "key", "revoke", "vera", "--to", lab.url, key=team["ada"][0])
    assert res.exit_code == 0 and one_line(res.output) == f"revoked vera's key {team['vera'][0][:8]} (viewer)"
    res = hil("lab", "key", "revoke", bob[:8], "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and one_line(res.output) == f"revoked bob's key {bob[:8]} (operator)"
    for gone in (team["vera"][0], bob):
        res = hil("--store", lab.url, "sessions", key=gone)
        assert res.exit_code == 1 and one_line(res.output) == (
            f"Error: lab {lab.url} refused the key (HTTP 401): check --key-file / $HIL_LAB_KEY")
    listed = json.loads(hil("lab", "key", "list", "--to", lab.url, "--json", key=lab.key).output)
    names = {r["name"] for r in listed}
    assert names >= {"admin", "otto", "ada"} and not {"vera", "bob"} & names
    assert hil("--store", lab.url, "sessions", key=team["otto"][0]).exit_code == 0
    res = hil("lab", "key", "revoke", "nobody", "--to", lab.url, key=lab.key)
    assert res.exit_code == 1 and "no key of 'nobody'" in one_line(res.output)


def test_an_old_labs_single_key_is_replaced_by_an_admin_key_and_people_survive_a_restart(tmp_path):
    data = tmp_path / "lab"
    data.mkdir(mode=0o700)  # private already: the only line is about the key
    old = "0123456789abcdef" * 4
    (data / "lab.key").write_text(old + "\n")
    (data / "lab.key").chmod(0o644)
    res = hil("lab", "serve", "--data", str(data), "--port", "0")  # an admin's key open to others: refused
    assert res.exit_code == 1 and one_line(res.output) == \
        f"Error: {data / 'lab.key'} is readable by others (mode 644): chmod 600 {data / 'lab.key'}"
    (data / "lab.key").chmod(0o600)
    server = LabServer(data)
    try:
        assert server.lines[0] == f"admin key written to {data / 'lab.key'}" and server.key != old
        res = hil("--store", server.url, "sessions", key=old)  # the key everyone held opens nothing now
        assert res.exit_code == 1 and "refused the key" in one_line(res.output)
        viewer, _ = add_key(server, "vera", "viewer", tmp_path)
    finally:
        assert server.stop() == 0
    again = LabServer(data)
    try:
        assert again.lines[0] == f"admin key in {data / 'lab.key'}" and again.key == server.key
        assert hil("--store", again.url, "sessions", key=viewer).exit_code == 0
        res = CliRunner(env={"HIL_LAB_KEY": again.key}).invoke(
            main, ["lab", "key", "list", "--to", again.url, "--json"], catch_exceptions=False)
        assert sorted(r["name"] for r in json.loads(res.output)) == ["admin", "vera"]
    finally:
        assert again.stop() == 0
