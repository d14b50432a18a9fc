"""Values a real rig's site must supply: how a template marks them, and how a config names them.

A template for a real rig (``configs/press.toml``, ``configs/crane.toml``) cannot know the site's addresses,
unit ids, serial ports, certificate paths, limits or the constants of its own machine. Each such value is
written in the template as a *site marker*, a string that says what to put there::

    host = "<site: IP address of the force source's controller>"

The config walk (:func:`daq.config.load.parse`) accepts a marker in place of any value of the schema - a
number, a string, a list or a whole table - and records it as *unsupplied* with its key path; a config with
any unsupplied value is refused as a whole (:class:`daq.config.load.SiteValuesMissing`, one line per
value) before a rig's rules run and before anything opens. The one reader of config files that every
command uses (:func:`daq.rigs.config.load`) refuses the same markers with the same words first, before it
imports the rig kind's code (:func:`daq.config.load.refuse_unsupplied`): at once, on any machine.

Filling a value in is replacing the marker, quotes and all, with the value: nothing else in the file
changes.

Why a marker in place of the value (and not a ``[site] unsupplied = [...]`` list beside placeholder
values): the value and the fact that it is still missing are one thing in one place, so they cannot
disagree (a filled-in value still listed, a placeholder address no longer listed); a key the schema does
not know is refused as it always is; and a marker can never pass for a value, since no value of any
table is text in angle brackets starting with ``<site:``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MARKER_PREFIX", "is_marker", "marker", "marker_text", "markers"]

MARKER_PREFIX = "<site:"
_MARKER = re.compile(r"^\s*<site:(.*)>\s*$", re.DOTALL)


def marker(what: str) -> str:
    """The marker for a value the site must supply, saying ``what`` to put there."""
    return f"{MARKER_PREFIX} {what}>"


def is_marker(value: Any) -> bool:
    """Whether a TOML value is a site marker (a string ``<site: ...>``)."""
    return isinstance(value, str) and _MARKER.match(value) is not None


def marker_text(value: str) -> str:
    """What a marker asks for (its text after ``<site:``), or a generic phrase for an empty one."""
    m = _MARKER.match(value)
    text = " ".join(m.group(1).split()) if m else ""
    return text or "a value the site must supply"


def markers(raw: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """Every marker in TOML data, in the file's order: ``(key path, what it asks for)``. Used to put the
    walk's findings in the order a reader meets them in the file."""
    if is_marker(raw):
        return [(path, marker_text(raw))]
    if isinstance(raw, dict):
        return [m for k, v in raw.items() for m in markers(v, (*path, str(k)))]
    return []
