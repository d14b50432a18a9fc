"""The search options of ``hil sessions`` (a lab's catalogue or a local store), parsed into
:class:`daq.lab.search.Filters` with one clear line for a bad value."""

from __future__ import annotations

import math
from datetime import datetime

import click

from daq.lab.search import Filters


def _time(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()  # a date or date-time; without zone: local time
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date or date-time (2026-11-01 or 2026-11-01T14:30)",
                                 param_hint=name) from None


def _param(text: str) -> tuple[str, float, float]:
    name, sep, span = text.partition("=")
    lo, sep2, hi = span.partition(":")
    try:
        bounds = (float(lo) if lo else -math.inf, float(hi) if hi else math.inf)
    except ValueError:
        bounds = (math.nan, math.nan)
    if not (name and sep and sep2) or math.isnan(bounds[0]) or math.isnan(bounds[1]) or bounds[0] > bounds[1]:
        raise click.BadParameter(f"{text!r}: give NAME=LO:HI with LO <= HI (either may be left out)",
                                 param_hint="--param")
    return name, max(bounds[0], -1e308), min(bounds[1], 1e308)


def search_options(f):
    """The filter options, outermost last so that --help lists them in this order."""
    for opt in reversed([
        click.option("--rig", default=None, metavar="NAME", help="Only sessions of this rig ([rig].name)."),
        click.option("--kind", default=None, help="Only this rig kind."),
        click.option("--status", type=click.Choice(["running", "complete", "aborted", "incomplete"]),
                     default=None, help="Only sessions with this status."),
        click.option("--since", default=None, metavar="WHEN", help="Started at or after (date or "
                     "date-time)."),
        click.option("--until", default=None, metavar="WHEN", help="Started before (date or date-time)."),
        click.option("--by", default=None, metavar="WHO", help="Started by this user."),
        click.option("--verdict", default=None, help="Analysis verdict: 'M3 keep', 'adequate', a crane's "
                     "structure..."),
        click.option("--param", "params", multiple=True, metavar="NAME=LO:HI",
                     help="An analysis estimate within [LO, HI], SI units (repeatable)."),
    ]):
        f = opt(f)
    return f


#: Sessions ``hil sessions`` lists when no --limit is given (--json: all).
DEFAULT_LIMIT = 50


class BadLimit(click.ClickException):
    """A --limit that is not a whole number >= 0: one line, exit 2 as for other bad options."""

    exit_code = 2


def _limit(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise BadLimit(f"--limit {value!r}: give a whole number of sessions (0 lists all)")
    return n


def limit_option(f):
    return click.option(
        "--limit", default=None, metavar="N", callback=_limit,
        help=f"List the N newest matching sessions (by start time; default {DEFAULT_LIMIT}, 0 = all) and "
             "say how many match in all. With --json every match is listed unless --limit is given.")(f)


def shown_limit(limit: int | None, as_json: bool) -> int | None:
    """How many sessions to list: ``None`` for all (--limit 0, or --json without --limit)."""
    if limit is None:
        return None if as_json else DEFAULT_LIMIT
    return limit or None


def more_line(shown: int, total: int) -> str | None:
    """The last line of a listing cut to the newest ``shown`` of ``total`` sessions (None if all shown)."""
    if shown >= total:
        return None
    return f"{shown} of {total} sessions shown (newest); --limit 0 lists all"


def filters_from(rig, kind, status, since, until, by, verdict, params) -> Filters:
    return Filters(rig=rig, kind=kind, status=status, since=_time(since, "--since"),
                   until=_time(until, "--until"), by=by, verdict=verdict, params=[_param(p) for p in params])
