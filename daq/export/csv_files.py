"""CSV export: one file per stream (time first, units in the header), events.csv and session.json."""

from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec
import numpy as np

from daq.export.layout import check_count, session_metadata, strict_json, time_base_text


def csv_file_name(stream: str) -> str:
    return re.sub(r"[^\w.\-]", "_", stream) + ".csv"


_ENCODE = msgspec.json.Encoder().encode


def _repr_token(tok: bytes) -> bytes:
    """msgspec's text of a float with 1e-9 <= |x| < 1e-4 as ``repr`` writes it: the same shortest
    round-trip digits, ``0.0000D...`` -> ``D....e-05`` and one-digit exponents (e-6..e-9) padded."""
    if tok[:1] == b"-":
        return b"-" + _repr_token(tok[1:])
    if tok[:6] == b"0.0000":  # 1e-5 <= x < 1e-4, which msgspec writes without an exponent
        d, rest = tok[6:7], tok[7:]
        return d + b"." + rest + b"e-05" if rest else d + b"e-05"
    return tok.replace(b"e-", b"e-0")


def _float_rows(a: np.ndarray) -> list[list]:
    """Rows of a 2-D float64 block as lists whose JSON text is, value for value, Python's ``repr``.

    msgspec writes a float exactly as ``repr`` does when 1e-4 <= |x| < 1e16 or x == 0 (the same
    shortest round-trip digits, ``-0.0`` included); the others become ``msgspec.Raw`` text: the tokens
    of 1e-9 <= |x| < 1e-4 rewritten from msgspec's own digits, the rest (NaN, inf, tiny, huge) by repr."""
    rows = a.tolist()
    mag = np.abs(a)
    with np.errstate(invalid="ignore"):
        odd = ~((mag >= 1e-4) & (mag < 1e16)) & (a != 0)  # NaN compares False: odd
        if not odd.any():
            return rows
        small = odd & (mag >= 1e-9) & (mag < 1e-4)
    ii, jj = np.nonzero(small)
    if len(ii):
        tokens = _ENCODE(a[ii, jj].tolist())[1:-1].split(b",")
        for i, j, tok in zip(ii.tolist(), jj.tolist(), tokens, strict=True):
            rows[i][j] = msgspec.Raw(_repr_token(tok))
    ii, jj = np.nonzero(odd & ~small)
    for i, j in zip(ii.tolist(), jj.tolist(), strict=True):
        row = rows[i]
        row[j] = msgspec.Raw(repr(row[j]))
    return rows


def _csv_lines(t: np.ndarray, columns: list[np.ndarray]) -> str:
    """Rows ``t,c1,c2,...`` with Python's shortest round-trip repr of every value (ints as ints, bools
    as 0/1), written by msgspec's C encoder as one JSON array of rows whose ``],[`` become newlines:
    no Python work per value except for the few floats msgspec writes otherwise than repr."""
    n = len(t)
    floats = [t.reshape(n, 1)]
    ints: list[np.ndarray] = []
    for col in columns:
        block = col.astype(np.int64) if col.dtype == np.bool_ else col
        block = block.reshape(n, -1)
        if not block.shape[1]:
            continue
        # t comes first and the data block has one dtype, so floats always precede ints (labels)
        (floats if block.dtype.kind == "f" and not ints else ints).append(block)
    a = np.hstack(floats).astype(np.float64, copy=False) if len(floats) > 1 else floats[0]
    rows = _float_rows(a)
    for block in ints:
        rows = list(map(list.__add__, rows, block.tolist()))
    text = _ENCODE(rows)
    return text[2:-2].replace(b"],[", b"\n").decode("ascii") + "\n"


def _to_csv(info, plans, events, out: Path, chunks, result) -> None:
    base = result.time_base
    for plan in plans:
        si = plan.info
        header = [f"t [s, {base}]"] + [f"{c} [{u}]" for c, u in zip(si.channels, si.units, strict=True)]
        header += [f"{c} [1]" for c in plan.labels]
        target = out / csv_file_name(plan.name)
        part = target.with_name(target.name + ".part")
        try:
            with open(part, "w", newline="") as f:
                f.write(",".join(_csv_field(h) for h in header) + "\n")
                k = 0
                for chunk, extra in chunks(plan):
                    if len(chunk):
                        f.write(_csv_lines(chunk.t, [chunk.data, *(extra[c] for c in plan.labels)]))
                    k += len(chunk)
                check_count(plan, k)
            os.replace(part, target)
        finally:
            if part.exists():
                part.unlink()
    import csv

    with open(out / "events.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["stream", "kind", "seq", f"t [s, {base}]", "body"])
        for ev in events:
            w.writerow([ev.stream, ev.kind, ev.seq, repr(ev.t), strict_json(ev.body)])
    meta = session_metadata(info)
    meta["time_base_description"] = time_base_text(base)
    meta["export"] = {"t_start": result.t_start, "t_stop": result.t_stop, "streams": result.streams}
    (out / "session.json").write_text(strict_json(meta, indent=2, default=str))


def _csv_field(text: str) -> str:
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text
