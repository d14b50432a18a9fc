"""CSV export: one file per stream (time first, units in the header), events.csv and session.json."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from daq.export.layout import check_count, session_metadata, strict_json, time_base_text


def csv_file_name(stream: str) -> str:
    return re.sub(r"[^\w.\-]", "_", stream) + ".csv"


def _csv_lines(t: np.ndarray, columns: list[np.ndarray]) -> str:
    """Rows ``t,c1,c2,...`` with Python's shortest round-trip repr of every value, built from the
    C-level repr of lists (~10x faster than formatting value by value)."""
    parts = [repr(t.tolist())[1:-1].split(", ")]
    for col in columns:
        block = col.astype(np.int64) if col.dtype == np.bool_ else col
        if block.ndim == 1:
            parts.append(repr(block.tolist())[1:-1].split(", "))
        elif block.shape[1]:
            parts.append(repr(block.tolist())[2:-2].replace(", ", ",").split("],["))
    return "\n".join(map(",".join, zip(*parts, strict=True))) + "\n"


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
