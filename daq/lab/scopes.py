"""The lab's roles as Tiled scopes (bluesky-httpserver's way of mapping roles to scopes), and Tiled's
refusal of a key without a scope as one line. See :mod:`daq.lab.people` for the people themselves."""

from __future__ import annotations

import re

from daq.lab.settings import LabError

READ = ["read:metadata", "read:data"]
WRITE = ["write:metadata", "write:data", "create:node"]
#: Following a live session (``subscribe()``): Tiled's client opens its WebSocket with a short-lived key it
#: makes from the person's key (``inherit``: the scopes of the person's Tiled role) and revokes at once.
KEYS = ["create:apikeys", "revoke:apikeys"]
#: Role -> the scopes of its keys (None: all of the principal's Tiled role, Tiled's "inherit").
ROLE_SCOPES: dict[str, list[str] | None] = {"viewer": READ + KEYS, "operator": READ + WRITE + KEYS,
                                            "admin": None}
#: Tiled roles the lab adds to its authentication database: a person's principal holds exactly what their
#: role may do, so a key made from theirs (``inherit``) can do no more than theirs. Tiled's own "user" role
#: holds deleting too, and its "admin" role cannot make keys (``subscribe()`` needs it): every admin
#: principal also holds "hil-keys".
LAB_ROLES = {"hil-viewer": READ + KEYS, "hil-operator": READ + WRITE + KEYS, "hil-keys": KEYS}
#: Role -> the Tiled role of the person's service principal (a key never exceeds its principal's role).
TILED_ROLE = {"viewer": "hil-viewer", "operator": "hil-operator", "admin": "admin"}
ROLES = tuple(ROLE_SCOPES)


def role_of(scopes: list[str]) -> str:
    """The role a key's scopes give (the highest one they cover)."""
    have = set(scopes)
    if "inherit" in have or "admin:apikeys" in have or "delete:node" in have:
        return "admin"
    if set(WRITE) <= have:
        return "operator"
    return "viewer"


#: Scope -> what it lets a key do, for the one-line refusal.
DOING = {"create:node": "push or create sessions", "write:data": "push or write data",
         "write:metadata": "write metadata", "delete:node": "delete", "delete:revision": "delete",
         "admin:apikeys": "manage keys", "read:principals": "manage keys", "write:principals": "manage keys",
         "read:data": "read data", "read:metadata": "read"}
NEEDS = {"viewer": ("read:metadata", "read:data"), "operator": tuple(WRITE)}


def refusal(url: str, detail: str) -> LabError | None:
    """Tiled's 401 for a key that lacks a scope ("Not enough permissions. Requires scopes [...]. Request
    had scopes [...]") as one line naming what the key may not do and whose key would; None otherwise."""
    found = re.match(r"Not enough permissions\. Requires scopes \[(.*?)\]\. Request had scopes \[(.*?)\]",
                     detail)
    if not found:
        return None
    need = set(re.findall(r"'([^']+)'", found.group(1)))
    had = set(re.findall(r"'([^']+)'", found.group(2)))
    missing = sorted(need - had) or sorted(need)
    role = next((r for r, scopes in NEEDS.items() if set(missing) <= set(scopes)), "admin")
    doing = sorted({DOING.get(s, s) for s in missing})
    return LabError(f"lab {url}: this key may not {' or '.join(doing)} (it lacks {', '.join(missing)}): "
                    f"that needs {'an' if role[0] in 'aeiou' else 'a'} {role}'s key")
