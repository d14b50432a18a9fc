"""People of the lab: one Tiled service principal and API key per person, with a role.

Built on Tiled's own identity machinery (no user table of ours): the lab server runs Tiled with an
authentication database; each person is a Tiled *service principal* (no password: people hold API keys),
and their key carries the scopes of their role, as bluesky-httpserver maps roles to scopes:

- viewer: reads sessions (``read:metadata``, ``read:data``);
- operator: + pushes and writes metadata (``write:metadata``, ``write:data``, ``create:node``);
- admin: everything Tiled's ``admin`` role has (deleting, managing people and keys).

The person's name is the key's note (Tiled keeps it with the key and answers it to ``whoami``), so who
holds a key is whatever the server says, not what a client claims. This module is the client side: the
admin's calls to Tiled's admin API (``/api/v1/auth/principal``) and ``whoami``; the roles' scopes are in
:mod:`daq.lab.scopes`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daq.lab.scopes import ROLE_SCOPES, ROLES, TILED_ROLE, role_of
from daq.lab.settings import LabError, LabUnreachable

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
AUTH = "/api/v1/auth"


@dataclass(frozen=True)
class Person:
    """A key of the lab as ``hil lab key list`` shows it."""

    name: str
    role: str
    key_id: str  # the key's first eight characters, as Tiled names it (never the secret)
    principal: str  # the Tiled service principal's UUID
    last_used: str | None = None

    def as_dict(self) -> dict:
        return {"name": self.name, "role": self.role, "key_id": self.key_id, "principal": self.principal,
                "last_used": self.last_used}


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise LabError(f"a person's name is 1 to 64 letters, digits, '.', '_', '@' or '-' starting with a "
                       f"letter or digit, got {name!r}")
    return name


def _request(method: str, url: str, key: str, path: str, **kwargs):
    import httpx  # lazy: only commands that talk to a lab need it

    from daq.lab.connect import probe_timeout  # lazy: only calls to a lab need it
    from daq.lab.trust import default_trust  # lazy: as above

    try:
        return httpx.request(method, url.rstrip("/") + AUTH + path,
                             headers={"Authorization": f"Apikey {key}"}, timeout=probe_timeout(),
                             verify=default_trust(), **kwargs)
    except httpx.HTTPError as exc:
        raise LabUnreachable(f"lab {url} unreachable ({type(exc).__name__}); retry later") from None


def _answer(resp, url: str, doing: str):
    """The JSON of a good answer; else one line saying why not."""
    if resp.status_code == 404 and _detail(resp) == "Not Found":  # no such route: Tiled without people
        raise LabError(f"lab {url} knows no people (a Tiled server with one shared key): {doing} needs a lab "
                       "served by `hil lab serve`")
    if resp.status_code in (401, 403):
        detail = _detail(resp)
        if "Not enough permissions" in detail or resp.status_code == 403:
            raise LabError(f"lab {url}: {doing} needs an admin's key; this key may not")
        raise LabError(f"lab {url} refused the key (HTTP {resp.status_code}): "
                       "check --admin-key-file / $HIL_LAB_KEY")
    if resp.status_code >= 400:
        raise LabError(f"lab {url}: {doing} failed (HTTP {resp.status_code}: {_detail(resp)[:200]})")
    return resp.json() if resp.content else None


def _detail(resp) -> str:
    try:
        detail = resp.json().get("detail", "")
    except ValueError:
        detail = resp.reason_phrase
    return " ".join(str(detail).split())


def whoami(url: str, key: str) -> dict | None:
    """Who holds ``key`` as the lab knows it: {"name", "role", "key_id", "principal"}; None for a lab with
    one shared key (Tiled's single-user mode knows no people) or a key the lab does not name."""
    resp = _request("GET", url, key, "/whoami")
    if resp.status_code == 404:
        return None
    principal = _answer(resp, url, "asking who holds the key")
    if not principal:
        return None
    for k in principal.get("api_keys", []):
        if k.get("first_eight") == key[:8]:
            return {"name": k.get("note") or principal["uuid"], "role": role_of(k.get("scopes", [])),
                    "key_id": key[:8], "principal": principal["uuid"]}
    return None


def list_people(url: str, admin_key: str) -> list[Person]:
    """Every live key of the lab, by name."""
    people: list[Person] = []
    offset = 0
    while True:
        page = _answer(_request("GET", url, admin_key, "/principal",
                                params={"page[offset]": offset, "page[limit]": 100}), url, "listing keys")
        for p in page:
            for k in p.get("api_keys", []):
                people.append(Person(name=k.get("note") or "", role=role_of(k.get("scopes", [])),
                                     key_id=k["first_eight"], principal=p["uuid"],
                                     last_used=k.get("latest_activity")))
        if len(page) < 100:
            return sorted(people, key=lambda x: (x.name, x.key_id))
        offset += 100


def add_person(url: str, admin_key: str, name: str, role: str) -> tuple[str, Person]:
    """A new service principal for ``name`` with one key of ``role``: (the key's secret, the person)."""
    check_name(name)
    if role not in ROLE_SCOPES:
        raise LabError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if any(p.name == name for p in list_people(url, admin_key)):
        raise LabError(f"{name} already has a key in the lab: revoke it first (hil lab key revoke {name})")
    principal = _answer(_request("POST", url, admin_key, "/principal", params={"role": TILED_ROLE[role]}),
                        url, "adding a person")
    made = _answer(_request("POST", url, admin_key, f"/principal/{principal['uuid']}/apikey",
                            json={"expires_in": None, "scopes": ROLE_SCOPES[role], "note": name}), url,
                   "making a key")
    return made["secret"], Person(name, role, made["first_eight"], principal["uuid"])


def revoke(url: str, admin_key: str, who: str) -> list[Person]:
    """Revoke the keys of the person named ``who``, or the key whose id is ``who``: the revoked ones."""
    people = list_people(url, admin_key)
    named = {p.principal for p in people if p.name == who}  # every key of theirs, any note (subscribe's too)
    chosen = [p for p in people if p.principal in named] or [p for p in people if p.key_id == who]
    if not chosen:
        raise LabError(f"no key of {who!r} in the lab (hil lab key list shows names and key ids)")
    if admin_key[:8] in {p.key_id for p in chosen} and \
            not any(p.role == "admin" and p.key_id != admin_key[:8] for p in people):
        raise LabError("that is the lab's last admin key: add another admin first")
    for p in chosen:
        _answer(_request("DELETE", url, admin_key, f"/principal/{p.principal}/apikey",
                         params={"first_eight": p.key_id}), url, "revoking a key")
    return chosen
