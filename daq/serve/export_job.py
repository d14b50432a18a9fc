"""One export of ``hil serve``, in a process of its own: ``python -m daq.serve.export_job STORE SESSION FMT
FOLDER`` writes what ``hil export SESSION --format FMT`` writes (same function, same defaults) into FOLDER -
a CSV folder zipped - and prints the file's name. A process keeps the export's CPU and memory away from the
server's event loop and from a running experiment's timing, and can be killed when its client goes away."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from daq.store.reader import SessionReader

SUFFIX = {"hdf5": ".h5", "mat": ".mat", "csv": ""}


def export_into(store_path: Path, session: str, fmt: str, folder: Path) -> Path:
    """The export file of ``session`` in ``folder`` (a CSV folder as a zip of its files)."""
    from daq.export.session_export import export  # lazy: the file writers, only when an export is asked for

    with SessionReader(store_path, create=False) as reader:
        info = reader.get_session(session)
        out = folder / f"session-{info.id}{SUFFIX[fmt]}"
        export(reader, info.id, fmt, out)
    if fmt != "csv":
        return out
    archive = folder / f"session-{info.id}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(out.iterdir()):
            z.write(f, f"{out.name}/{f.name}")
            f.unlink()  # the folder shrinks as the zip grows: the disk holds the data about once
    out.rmdir()
    return archive


def main(argv: list[str]) -> int:
    store, session, fmt, folder = argv
    try:
        print(export_into(Path(store), session, fmt, Path(folder)).name, flush=True)
    except Exception as exc:  # noqa: BLE001 - one line for the server, no traceback
        print("Error: " + " ".join((str(exc) or type(exc).__name__).split()), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
