"""Plot files of one session's analysis: named after the session and titled with it, so the plots of two
runs written to the same folder never overwrite each other and a PNG on its own still says what it shows.

A rig draws into a private folder (its own file names); each PNG then gets a header line naming the
session above the figure, pixel for pixel unchanged below it, and is moved to ``<folder>/<session>-<name>``.
Only that session's own earlier files can be replaced (an analysis done again)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

HEADER_PX = 26  # height of the header line added above each figure


def session_file_name(session_id: str, name: str) -> str:
    """``fit.png`` of session ``ab12`` -> ``ab12-fit.png``."""
    return f"{session_id}-{name}"


def stamp_session(path: Path, title: str) -> None:
    """Add a header line ``title`` above the PNG at ``path`` (the figure below it unchanged)."""
    import matplotlib  # lazy: heavy, only for plots

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt

    img = mpimg.imread(path)
    h, w = img.shape[:2]
    dpi = 100
    fig = plt.figure(figsize=(w / dpi, (h + HEADER_PX) / dpi), dpi=dpi)
    fig.figimage(img, xo=0, yo=0, origin="upper")
    fig.text(0.5, 1 - 0.5 * HEADER_PX / (h + HEADER_PX), title, ha="center", va="center", fontsize=10)
    fig.savefig(path, dpi=dpi, metadata={"Title": title})  # also in the file: a viewer's "title"
    plt.close(fig)


def write_session_plots(draw: Callable[[Path], Iterable[Path]], folder: str | Path, session_id: str,
                        what: str = "") -> list[Path]:
    """Call ``draw(private_folder)`` (a rig's ``plots``), then stamp every PNG it wrote with the session
    (and ``what``: the rig kind) and move it into ``folder`` under the session's name; the moved paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    title = f"session {session_id}" + (f" ({what})" if what else "")
    out: list[Path] = []
    with tempfile.TemporaryDirectory(prefix=f".{session_id}-", dir=folder) as private:
        for drawn in draw(Path(private)):
            drawn = Path(drawn)
            if drawn.suffix.lower() == ".png":
                stamp_session(drawn, f"{title}: {drawn.stem.replace('_', ' ')}")
            target = folder / session_file_name(session_id, drawn.name)
            os.replace(drawn, target)
            out.append(target)
    return out
