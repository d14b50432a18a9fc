"""A machine-tool session's FRFs and coherence written as Universal File Format dataset 58 (ASCII or
binary 58b), with the node numbers and directions of the model's DOFs and SI units."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from daq.rigs.machine_tool.rig import mt_arrays
from daq.rigs.machine_tool.uff import (
    _DIRECTIONS,
    FUNC_COHERENCE,
    FUNC_FRF,
    SPEC_ACCELERATION,
    SPEC_FORCE,
    SPEC_FREQUENCY,
    UFF_SUFFIXES,
    UffError,
    default_node_numbers,
    model_labels,
    split_label,
)


def _uff_dataset(func: int, k: int, id_lines: list[str], rsp: str, ref: str, nodes: dict[str, int],
                 freq: np.ndarray, data: np.ndarray, binary: bool) -> dict:
    rn, rd = split_label(rsp)
    fn, fd = split_label(ref)
    dirs = {v: k for k, v in _DIRECTIONS.items()}
    frf = func == FUNC_FRF
    return {
        "type": 58, "binary": int(binary), **{f"id{j + 1}": line for j, line in enumerate(id_lines)},
        "func_type": func, "func_id": k, "ver_num": 0, "load_case_id": 0,
        "rsp_ent_name": rn, "rsp_node": nodes[rn], "rsp_dir": dirs[rd],
        "ref_ent_name": fn, "ref_node": nodes[fn], "ref_dir": dirs[fd],
        "abscissa_spacing": 1 if _even(freq) else 0, "z_axis_value": 0.0,
        "abscissa_spec_data_type": SPEC_FREQUENCY, "abscissa_axis_lab": "Frequency",
        "abscissa_axis_units_lab": "Hz",
        "ordinate_spec_data_type": SPEC_ACCELERATION if frf else 0,
        "ordinate_axis_lab": "Acceleration" if frf else "Coherence",
        "ordinate_axis_units_lab": "m/s^2" if frf else "NONE",
        "orddenom_spec_data_type": SPEC_FORCE if frf else 0,
        "orddenom_axis_lab": "Force" if frf else "NONE",
        "orddenom_axis_units_lab": "N" if frf else "NONE",
        "z_axis_spec_data_type": 0,
        "x": np.asarray(freq, dtype=float), "data": data,
    }


def _even(freq: np.ndarray) -> bool:
    d = np.diff(freq)
    return bool(d.size and np.allclose(d, d[0], rtol=1e-9, atol=0))


@dataclass
class UffExportResult:
    paths: list[Path]
    datasets: int
    frfs: int
    coherence: bool
    seconds: float

    def as_dict(self) -> dict:
        return {"paths": [str(p) for p in self.paths], "datasets": self.datasets, "frfs": self.frfs,
                "coherence": self.coherence, "seconds": round(self.seconds, 3)}


def default_output(session_id: str) -> Path:
    return Path("exports") / f"session-{session_id}_uff"


def export_uff(store, session: str, out: str | Path | None = None, *, force: bool = False,
               binary: bool = False) -> UffExportResult:
    """Write a machine-tool session's FRFs (H1 from the streams or the imported ones) as UFF 58.

    ``binary``: dataset 58b (the values as IEEE doubles, exact) instead of ASCII (12 significant digits).
    ``out`` ending in .uff/.unv: one file with every position; otherwise a folder with one file per
    position (``position_<mm>mm_<role>.uff``). An existing output is replaced only with ``force``.
    """
    began = time.perf_counter()
    info = store.get_session(session)
    if info.kind != "machine-tool":
        raise UffError(f"session {info.id} is a {info.kind} session; UFF export writes machine-tool FRFs")
    arrays = mt_arrays(store, info.id)
    with_coh = all(c is not None for c in arrays.coherence)
    for p, H in zip(arrays.positions, arrays.H, strict=True):
        if not np.all(np.isfinite(H)):
            raise UffError(f"session {info.id}: FRFs at {p} m have non-finite values; UFF cannot carry them")
    nodes = default_node_numbers(model_labels())
    stamp = datetime.fromtimestamp(info.started, UTC).strftime("%d-%b-%y %H:%M:%S")
    per_position: list[list[dict]] = []
    k = 0
    for p, role, H, C in zip(arrays.positions, arrays.roles, arrays.H, arrays.coherence, strict=True):
        sets = []
        for i, ref in enumerate(arrays.inputs):
            for j, rsp in enumerate(arrays.labels):
                ids = [f"FRF {rsp}/{ref} accelerance", f"hil-lab session {info.id}", stamp,
                       f"position={float(p)!r} m role={role}", "NONE"]
                k += 1
                sets.append(_uff_dataset(FUNC_FRF, k, ids, rsp, ref, nodes, arrays.freq,
                                         np.asarray(H[i, j], dtype=complex), binary))
                if with_coh:
                    assert C is not None  # with_coh: every position has one
                    ids = [f"Coherence {rsp}/{ref}", *ids[1:]]
                    k += 1
                    sets.append(_uff_dataset(FUNC_COHERENCE, k, ids, rsp, ref, nodes, arrays.freq,
                                             np.asarray(C[i, j], dtype=float), binary))
        per_position.append(sets)
    out = Path(out) if out is not None else default_output(info.id)
    if out.suffix.lower() in UFF_SUFFIXES:
        targets = [(out, [s for sets in per_position for s in sets])]
    else:
        targets = [(out / f"position_{1000 * p:06.1f}mm_{role}.uff", sets)
                   for p, role, sets in zip(arrays.positions, arrays.roles, per_position, strict=True)]
    for path, _ in targets:
        if path.exists() and not force:
            raise UffError(f"{path} already exists (use --force to overwrite it)")
    for path, sets in targets:
        _write(path, sets)
    return UffExportResult([p for p, _ in targets], k, k // (2 if with_coh else 1), with_coh,
                           time.perf_counter() - began)


def _write(path: Path, sets: list[dict]) -> None:
    """Write datasets under a temporary name, then rename (never a half file)."""
    import pyuff  # lazy: only reading or writing UFF files needs it

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UffError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    part = path.with_name(path.name + ".part")
    one = path.with_name(path.name + ".one")
    try:
        # pyuff re-reads the whole file after every dataset it appends (quadratic in the count): write
        # each dataset to a small file of its own and concatenate.
        with open(part, "wb") as fh:
            for ds in sets:
                if one.exists():
                    one.unlink()
                pyuff.UFF(str(one)).write_sets([ds], mode="add")  # (pyuff's "overwrite" loses binary headers)
                fh.write(one.read_bytes())
        os.replace(part, path)
    except OSError as exc:
        raise UffError(f"cannot write {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - pyuff raises bare Exceptions
        raise UffError(f"cannot write {path}: {exc}") from None
    finally:
        for tmp in (part, one):
            if tmp.exists():
                tmp.unlink()
