"""Is the lab's copy of a session what was pushed? Checked block by block against digests, without
downloading the samples (each block: a 304 to its recorded hash, daq/lab/digests.py), and the small tables
read back and hashed. Used by ``hil lab verify`` (against the digests the push recorded in the lab), by a
push that finds the session already there (against the local session's own digests: a changed copy is
repaired, never called verified) and by ``hil --store URL show``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from daq.lab import layout
from daq.lab.arrow_columns import from_arrow
from daq.lab.checks import table_sha256
from daq.lab.digests import BlockDigests, block_holds, block_index, unreadable, whole_sha256


@dataclass(frozen=True)
class Problem:
    """One part of a copy that is not what was pushed: a block of an array, a table, a lost node."""

    stream: str  # "" for the session's events table
    part: str  # t, data, frames, events, or "" for the whole stream node
    block: int | None = None

    def text(self) -> str:
        name = "/".join(x for x in (self.stream, self.part) if x)
        return name + ("" if self.block is None else f" block {self.block}") + ("" if self.part else " lost")


@dataclass
class ArrayWant:
    """What one array of the copy should be: its shape and per-block digests (None: a copy pushed before
    block digests, checked against ``whole_sha256`` by reading it)."""

    shape: tuple[int, ...]
    blocks: BlockDigests | None
    whole_sha256: str | None = None


def child(node, key: str):
    try:
        return node[key]
    except KeyError:
        return None


def array_problems(snode, stream: str, part: str, want: ArrayWant) -> tuple[object | None, list[Problem]]:
    """(the array node or None, what of it is not as pushed)."""
    arr = child(snode, part)
    if arr is None:
        return None, [Problem(stream, part, None)] if want.shape[0] else []
    shape = tuple(arr.structure().shape)
    if shape != want.shape:
        return arr, [Problem(stream, part, None)]
    if want.blocks is None:
        return arr, ([] if whole_sha256(arr) == want.whole_sha256 else [Problem(stream, part, None)])
    return arr, [Problem(stream, part, i) for i, (sha, etag) in enumerate(zip(want.blocks.sha256,
                                                                          want.blocks.etag, strict=True))
                 if not block_holds(arr, block_index(len(shape), i), etag, sha)]


def table_holds(parent, key: str, rows: int, sha: str) -> bool:
    """The table ``key`` read back (a light client's ``read_arrow``) has these rows and this digest."""
    node = child(parent, key)
    if node is None:
        return rows == 0
    names = list(layout.EVENT_COLUMNS if key == layout.EVENTS else layout.FRAME_COLUMNS)
    try:
        table = node.read_arrow()
    except Exception as exc:  # noqa: BLE001 - a table file lost on the lab's disk: the server errs
        if unreadable(node, exc):
            return False
        raise
    try:
        return (table.num_rows, table_sha256(from_arrow(table, names))) == (rows, sha)
    except ValueError:  # a column that cannot be ours
        return False


# ---------------------------------------------------------------------- against what the lab recorded


def recorded_wants(snode, si_meta: dict) -> Iterator[tuple[str, ArrayWant]]:
    """(part, what it should be) of a stream's arrays, from the digests the push recorded on them."""
    rows, width = int(si_meta["n_samples"]), len(si_meta["channels"])
    for part, shape in ((layout.TIME, (rows,)), (layout.DATA, (rows, width))):
        arr = child(snode, part)
        meta = arr.metadata if arr is not None else {}
        yield part, ArrayWant(shape, BlockDigests.of(meta), meta.get("sha256"))


def recorded_problems(node, on_stream: Callable[[str], None] | None = None) -> list[Problem]:
    """What of the session container ``node`` (a light push client) differs from what its push recorded."""
    meta = layout.plain(node.metadata)
    problems: list[Problem] = []
    for name, si in sorted((meta.get("streams") or {}).items()):
        if si.get("type") != "frame" or not si.get("n_samples"):
            continue
        if on_stream is not None:
            on_stream(name)
        snode = child(node, name)
        if snode is None:
            problems.append(Problem(name, ""))
            continue
        for part, want in recorded_wants(snode, si):
            problems += array_problems(snode, name, part, want)[1]
        frames = child(snode, layout.FRAMES)
        if frames is None or not table_holds(snode, layout.FRAMES, int(frames.metadata.get("rows", -1)),
                                             str(frames.metadata.get("sha256"))):
            problems.append(Problem(name, layout.FRAMES))
    events = child(node, layout.EVENTS)
    if events is not None and not table_holds(node, layout.EVENTS, int(events.metadata.get("rows", -1)),
                                              str(events.metadata.get("sha256"))):
        problems.append(Problem("", layout.EVENTS))
    return problems


def verify_sessions(root, sessions: list[str], say: Callable[[str], None]) -> int:
    """``hil lab verify``: one line per session; the number of sessions whose copy is not as pushed."""
    bad = 0
    for sid in sessions:
        node = child(root, sid)
        if node is None:
            say(f"{sid}: not in the lab")
            bad += 1
            continue
        state = (layout.plain(node.metadata.get("replication")) or {}).get("state")
        if state != layout.VERIFIED:
            say(f"{sid}: a push has not finished ({state}); not checked")
            continue
        problems = recorded_problems(node)
        if problems:
            bad += 1
            say(f"{sid}: changed or lost in the lab: {', '.join(p.text() for p in problems)}")
        else:
            say(f"{sid}: as pushed")
    return bad


# ---------------------------------------------------------------------- against the local session


def local_problems(node, info, check) -> tuple[list[Problem], list[tuple[object, dict]]]:
    """What of the lab's session ``node`` differs from the local session (its :class:`SessionCheck`), and
    the arrays found whole as (node, the digests to record on it) - a push that finds a session already
    there checks it this way before it calls it verified."""
    problems: list[Problem] = []
    whole: list[tuple[object, dict]] = []
    for name, sc in check.streams.items():
        snode = child(node, name)
        if snode is None:
            problems.append(Problem(name, ""))
            continue
        width = len(info.streams[name].channels)
        for part, want in ((layout.TIME, ArrayWant((sc.rows,), sc.t_blocks)),
                           (layout.DATA, ArrayWant((sc.rows, width), sc.data_blocks))):
            arr, found = array_problems(snode, name, part, want)
            problems += found
            if arr is not None and not found:
                assert want.blocks is not None  # a local check has them
                whole.append((arr, want.blocks.as_metadata()))
        if not table_holds(snode, layout.FRAMES, sc.frames, sc.frames_sha256):
            problems.append(Problem(name, layout.FRAMES))
    if not table_holds(node, layout.EVENTS, check.events, check.events_sha256):
        problems.append(Problem("", layout.EVENTS))
    return problems, whole


# ---------------------------------------------------------------------- the rig's marks against the lab

#: Session ids asked about in one search (they travel in the query string).
MARKS_PER_QUERY = 100


def held_verified(root, ids: list[str]) -> set[str]:
    """Which of ``ids`` the lab holds verified (one search per MARKS_PER_QUERY ids)."""
    from tiled.queries import Eq, KeysFilter  # lazy: tiled's client side

    held: set[str] = set()
    for k in range(0, len(ids), MARKS_PER_QUERY):
        found = root.search(Eq("replication.state", layout.VERIFIED)).search(
            KeysFilter(ids[k:k + MARKS_PER_QUERY]))
        held.update(found.keys())
    return held


def forget_lost(root, marks, lab: str, local: set[str], say: Callable[[str], None]) -> list[str]:
    """Sessions of ``local`` (the store's) that the rig marked as held verified by ``lab`` but the lab no
    longer holds so (deleted there): unmarked, so that ``hil lab push --pending`` pushes them again."""
    lab = lab.rstrip("/")
    marked = sorted(sid for sid, labs in marks.labs_by_session().items() if lab in labs and sid in local)
    held = held_verified(root, marked) if marked else set()
    lost = [sid for sid in marked if sid not in held]
    for sid in lost:
        marks.unmark(sid, lab)
        say(f"{sid}: marked as in the lab, but the lab no longer holds it; pushing it again")
    return lost
