"""Machine-tool FRFs as Universal File Format dataset 58: read files into a session
(writing: :mod:`daq.rigs.machine_tool.uff_export`).

Modal-analysis systems exchange measured FRFs as UFF dataset 58 ("function at nodal DOF"); pyuff reads and
writes the records. This module maps them to and from the machine-tool session layout that
:func:`daq.rigs.machine_tool.rig.mt_arrays` reads: events ``position_start`` / ``frf_start`` {position, role,
input, n} / ``position_end`` on ``mt.plan`` and the stream ``mt.frf`` (``freq`` [Hz], ``<dof>.re``,
``<dof>.im`` [m/s^2/N], ``<dof>.coh`` [1] when every FRF has a coherence).

Conventions (what the header fields mean here):

* **Measurement DOFs** are the response and reference node/direction of record 6, as modal systems carry
  them. A node is the model's node name (``T1``, ``B5``, ``S`` ...) when the entity-name field holds it
  (our export writes it there), else its number: by default the model's nodes numbered 1, 2, ... in the
  order of its measured DOFs (T1=1, T2=2, T3=3, B1=4 ... B6=9, S=10), or a ``[nodes]`` table of the map
  file. Directions 1/2/3 are x/y/z; -1/-2/-3 flip the sign of the function. Scalar and rotational DOFs
  are refused (the model measures translations only).
* **Test condition** (axis position and role) is carried in the id lines, as modal systems carry the load
  case: a token ``position=<value> [m|mm]`` and ``role=identification|validation`` in any id line (our
  export writes them in id line 4, the load-case name). A map file (``--map``) may give them per file
  name instead (``[files."name.unv"] position = 0.05, role = "validation"``); the map wins. Without a
  role the FRF counts for identification.
* **Function types**: 4 (FRF, complex) and 6 (coherence, real, paired with the FRF of the same
  position and DOFs). Other dataset types in a file (geometry, units, headers) are skipped and counted;
  a file without any dataset 58 is refused, as are other function types.
* **Units** come from the axis-units labels of records 8-10 and must be there for the ordinate
  numerator and denominator (a bare "acceleration" could be m/s^2 or g). Abscissa: Hz (assumed when the
  label is missing but the data type is frequency) or rad/s. Numerator: a length, velocity or
  acceleration unit (m, mm, um, in; /s; /s^2; g), checked against the specific data type (8, 11, 12)
  when that is given; denominator: N, kN or lbf. Receptance and mobility are converted to accelerance
  (x -(2 pi f)^2 and x j 2 pi f, time factor exp(+j omega t)); everything is stored in SI.
* **Export** writes accelerance in m/s^2/N over Hz, complex double precision (12 significant digits
  in ASCII), plus a coherence dataset per FRF when the session has coherence. UFF 58 stores the
  abscissa start and step with 6 significant digits (record 7, E13.5): frequency grids whose step is not
  exact in 6 digits come back rounded there.

Nothing is written to the store until every file has been read and checked, so a corrupt file or a
wrong dataset leaves the store untouched; the session's messages are committed in one transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from daq.bus.frames import Event, Frame
from daq.config.load import parse, read_toml
from daq.export.session_export import ExportError
from daq.rigs.machine_tool.rig import FRF_STREAM, PLAN_STREAM, MachineToolConfig, MTArrays
from identification.models.machine_tool_model import MachineTool

FUNC_FRF = 4
FUNC_COHERENCE = 6
_FUNC_NAMES = {
    0: "general", 1: "time response", 2: "auto spectrum", 3: "cross spectrum", 4: "FRF",
    5: "transmissibility", 6: "coherence", 7: "auto correlation", 8: "cross correlation", 9: "PSD",
    12: "spectrum", 18: "mode indicator function", 26: "multiple coherence",
}
SPEC_GENERAL = (0, 1)
SPEC_DISPLACEMENT, SPEC_VELOCITY, SPEC_ACCELERATION = 8, 11, 12
SPEC_REACTION_FORCE, SPEC_FORCE, SPEC_TIME, SPEC_FREQUENCY = 9, 13, 17, 18
_SPEC_QUANTITY = {SPEC_DISPLACEMENT: "displacement", SPEC_VELOCITY: "velocity",
                  SPEC_ACCELERATION: "acceleration"}
_POWER = {"displacement": 2, "velocity": 1, "acceleration": 0}  # factors j omega to accelerance
_DIRECTIONS = {1: "x", 2: "y", 3: "z"}
_LENGTH = {"m": 1.0, "mm": 1e-3, "um": 1e-6, "µm": 1e-6, "micron": 1e-6, "cm": 1e-2, "in": 0.0254,
           "inch": 0.0254, "ft": 0.3048}
_FORCE = {"n": 1.0, "kn": 1e3, "lbf": 4.4482216152605, "lb": 4.4482216152605}
G_N = 9.80665  # m/s^2 per g (standard gravity)
_NONE = ("", "none", "-")
_POSITION = re.compile(r"\bposition\s*=\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(mm|m)?\b", re.I)
_ROLE = re.compile(r"\brole\s*=\s*([a-z]+)", re.I)
ROLES = ("identification", "validation")
FRF_UNIT = "m/s^2/N"
#: Nominal time between rows of ``mt.frf`` (rows are frequencies, not samples in time), s.
ROW_DT = 1e-6
UFF_SUFFIXES = (".uff", ".unv")


class UffError(ExportError):
    """A UFF file that cannot be read, mapped or written (one clear message)."""


# ----------------------------------------------------------------------------------------- DOFs


def split_label(label: str) -> tuple[str, str]:
    """``"T1x"`` -> (``"T1"``, ``"x"``): a measured DOF's node name and direction."""
    if len(label) < 2 or label[-1] not in "xyz":
        raise UffError(f"DOF label {label!r} does not end in a direction x, y or z")
    return label[:-1], label[-1]


def model_labels() -> list[str]:
    """The machine-tool model's measured DOFs, in its order."""
    return list(MachineTool().obs_labels)


def default_node_numbers(labels: list[str]) -> dict[str, int]:
    """Node name -> UFF node number: 1, 2, ... in the order the nodes first appear in ``labels``."""
    numbers: dict[str, int] = {}
    for label in labels:
        numbers.setdefault(split_label(label)[0], len(numbers) + 1)
    return numbers


@dataclass
class Mapping:
    """What the header fields do not say: node numbers and, per file name, position and role."""

    nodes: dict[int, str]  # UFF node number -> model node name
    files: dict[str, dict] = field(default_factory=dict)  # file name -> {"position": m, "role": str}

    @classmethod
    def default(cls, labels: list[str]) -> Mapping:
        return cls({n: name for name, n in default_node_numbers(labels).items()})


def load_mapping(path: str | Path | None, labels: list[str]) -> Mapping:
    """The map file (TOML: ``[nodes]`` number = "name", ``[files."name"]`` position/role) over defaults."""
    mapping = Mapping.default(labels)
    if path is None:
        return mapping
    raw = read_toml(path)
    unknown = set(raw) - {"nodes", "files"}
    if unknown:
        raise UffError(f"{path}: unknown table(s) {', '.join(sorted(unknown))} (known: nodes, files)")
    names = {split_label(lb)[0] for lb in labels}
    for key, name in (raw.get("nodes") or {}).items():
        if not str(key).lstrip("-").isdigit() or name not in names:
            raise UffError(f"{path}: [nodes] {key} = {name!r}: need a node number = one of {sorted(names)}")
        mapping.nodes[int(key)] = name
    for fname, entry in (raw.get("files") or {}).items():
        if not isinstance(entry, dict) or set(entry) - {"position", "role"}:
            raise UffError(f"{path}: [files.{fname!r}] takes position (m) and role only")
        pos = entry.get("position")
        if pos is not None and (not isinstance(pos, int | float) or not math.isfinite(pos)):
            raise UffError(f"{path}: [files.{fname!r}].position must be a number of metres")
        role = entry.get("role")
        if role is not None and role not in ROLES:
            raise UffError(f"{path}: [files.{fname!r}].role must be one of {', '.join(ROLES)}")
        mapping.files[fname] = {"position": None if pos is None else float(pos), "role": role}
    return mapping


# ----------------------------------------------------------------------------------------- units


def _clean(label) -> str:
    text = str(label or "").strip()
    return "" if text.lower() in _NONE else text


def _norm(unit: str) -> str:
    s = unit.replace(" ", "").replace("**", "^").replace("²", "^2").replace("/s/s", "/s^2")
    return s.lower()


def response_unit(label: str) -> tuple[str, float]:
    """A response unit label -> (quantity, factor to SI): ``"mm/s^2"`` -> ("acceleration", 1e-3)."""
    s = _norm(label)
    if s in ("g", "gn", "g0"):
        return "acceleration", G_N
    m = re.fullmatch(r"([a-zµ]+)(/s(\^?2)?)?", s)
    if m is None or m.group(1) not in _LENGTH:
        raise UffError(f"unknown response unit {label!r} (need a length, velocity or acceleration unit)")
    quantity = "displacement" if m.group(2) is None else "acceleration" if m.group(3) else "velocity"
    return quantity, _LENGTH[m.group(1)]


def force_unit(label: str) -> float:
    """A force unit label -> factor to N."""
    s = _norm(label)
    if s not in _FORCE:
        raise UffError(f"unknown force unit {label!r} (use N, kN or lbf)")
    return _FORCE[s]


def frf_units(ds: dict) -> tuple[float, str, float, str]:
    """(abscissa factor to Hz, response quantity, factor of the values to SI, description) of a 58."""
    spec = int(ds.get("abscissa_spec_data_type") or 0)
    xlab = _clean(ds.get("abscissa_axis_units_lab"))
    if spec not in (*SPEC_GENERAL, SPEC_FREQUENCY):
        raise UffError(f"abscissa is data type {spec}{' (time)' if spec == SPEC_TIME else ''}, not frequency")
    if not xlab:
        if spec != SPEC_FREQUENCY:
            raise UffError("abscissa has neither a frequency data type nor a units label")
        x_factor = 1.0
    elif _norm(xlab) == "hz":
        x_factor = 1.0
    elif _norm(xlab) in ("rad/s", "rad/sec"):
        x_factor = 1.0 / (2 * np.pi)
    else:
        raise UffError(f"unknown abscissa unit {xlab!r} (use Hz or rad/s)")
    num = _clean(ds.get("ordinate_axis_units_lab"))
    den = _clean(ds.get("orddenom_axis_units_lab"))
    if num and not den and "/" in num:  # the whole FRF unit in the numerator label, e.g. "m/s^2/N"
        head, _, tail = num.rpartition("/")
        if _norm(tail) in _FORCE:
            num, den = head, tail
    if not num:
        raise UffError("missing ordinate (response) units label; cannot tell m/s^2 from g or mm")
    if not den:
        raise UffError("missing ordinate denominator (force) units label")
    quantity, num_factor = response_unit(num)
    num_spec = int(ds.get("ordinate_spec_data_type") or 0)
    if num_spec not in SPEC_GENERAL:
        expected = _SPEC_QUANTITY.get(num_spec)
        if expected is None:
            raise UffError(f"ordinate numerator is data type {num_spec}, not a displacement, velocity or "
                           "acceleration")
        if expected != quantity:
            raise UffError(f"ordinate data type says {expected} but its unit {num!r} is one of {quantity}")
    den_spec = int(ds.get("orddenom_spec_data_type") or 0)
    if den_spec not in (*SPEC_GENERAL, SPEC_FORCE, SPEC_REACTION_FORCE):
        raise UffError(f"ordinate denominator is data type {den_spec}, not a force")
    return x_factor, quantity, num_factor / force_unit(den), f"{num}/{den}"


def to_accelerance(freq: np.ndarray, values: np.ndarray, quantity: str) -> np.ndarray:
    """Receptance or mobility (SI) -> accelerance, time factor exp(+j omega t)."""
    return values * (2j * np.pi * freq) ** _POWER[quantity]


# ----------------------------------------------------------------------------------------- reading


@dataclass
class UffFunction:
    """One dataset 58 after mapping and unit conversion."""

    file: str
    index: int  # dataset number in the file (0-based)
    kind: str  # "frf" or "coherence"
    position: float  # m
    role: str
    input: str  # reference DOF label
    response: str
    freq: np.ndarray  # Hz
    values: np.ndarray  # accelerance m/s^2/N (complex) or coherence (real)
    unit: str  # the unit as the file gave it ("" for coherence)


@dataclass
class UffFile:
    path: str
    sha256: str
    functions: list[UffFunction]
    skipped: dict[int, int]  # dataset type -> count of datasets other than 58


def _condition(ds: dict, where: str, mapped: dict | None) -> tuple[float, str]:
    """(position in m, role) from the map entry of the file, else the id lines' tokens."""
    pos, role = None, None
    for key in ("id1", "id2", "id3", "id4", "id5"):
        text = str(ds.get(key) or "")
        m = _POSITION.search(text)
        if m is not None:
            value = float(m.group(1)) * (1e-3 if (m.group(2) or "m").lower() == "mm" else 1.0)
            if pos is not None and value != pos:
                raise UffError(f"{where}: id lines give two positions ({pos} m and {value} m)")
            pos = value
        r = _ROLE.search(text)
        if r is not None:
            if r.group(1).lower() not in ROLES:
                raise UffError(f"{where}: role {r.group(1)!r} is not one of {', '.join(ROLES)}")
            role = r.group(1).lower()
    if mapped is not None:
        pos = mapped["position"] if mapped["position"] is not None else pos
        role = mapped["role"] or role
    if pos is None:
        raise UffError(f"{where}: no axis position (put 'position=<m> m' in an id line or give the file a "
                       "position in the --map file)")
    return pos, role or "identification"


def _dof(ds: dict, side: str, where: str, mapping: Mapping, labels: list[str]) -> tuple[str, float]:
    """(label, sign) of the response (``rsp``) or reference (``ref``) DOF of a 58."""
    names = {split_label(lb)[0] for lb in labels}
    entity = _clean(ds.get(f"{side}_ent_name"))
    node = ds.get(f"{side}_node")
    direction = int(ds.get(f"{side}_dir") or 0)
    what = "response" if side == "rsp" else "reference"
    if entity in names:
        name = entity
    elif node is not None and int(node) in mapping.nodes:
        name = mapping.nodes[int(node)]
    else:
        raise UffError(f"{where}: {what} node {node} ({entity or 'no entity name'}) is not a model node "
                       "(give its name in the entity-name field or a [nodes] table in the --map file)")
    if abs(direction) not in _DIRECTIONS:
        raise UffError(f"{where}: {what} direction {direction} is not a translation (1, 2, 3 or negative)")
    label = name + _DIRECTIONS[abs(direction)]
    if label not in labels:
        raise UffError(f"{where}: {what} DOF {label} is not measured by the model ({', '.join(labels)})")
    return label, (-1.0 if direction < 0 else 1.0)


def _function(ds: dict, where: str, fname: str, index: int, mapping: Mapping,
              labels: list[str]) -> UffFunction:
    func = int(ds.get("func_type", -1))
    if func not in (FUNC_FRF, FUNC_COHERENCE):
        name = _FUNC_NAMES.get(func, "unknown")
        raise UffError(f"{where}: function type {func} ({name}) is not an FRF (4) or a coherence (6)")
    x = np.asarray(ds.get("x"), dtype=float)
    y = np.asarray(ds.get("data"))
    n = int(ds.get("num_pts") or 0)
    if x.ndim != 1 or y.shape != x.shape or x.size != n or n < 2:
        raise UffError(f"{where}: header announces {n} values, the data has {y.size} "
                       "(truncated or malformed)")
    position, role = _condition(ds, where, mapping.files.get(fname))
    response, s_rsp = _dof(ds, "rsp", where, mapping, labels)
    reference, s_ref = _dof(ds, "ref", where, mapping, labels)
    if func == FUNC_COHERENCE:
        if np.iscomplexobj(y) or not np.all(np.isfinite(y)) or np.any(y < 0) or np.any(y > 1 + 1e-9):
            raise UffError(f"{where}: coherence must be real values in [0, 1]")
        xlab = _clean(ds.get("abscissa_axis_units_lab"))
        x_factor = 1.0 / (2 * np.pi) if xlab and _norm(xlab) in ("rad/s", "rad/sec") else 1.0
        return UffFunction(fname, index, "coherence", position, role, reference, response, x * x_factor,
                           y.astype(float), "")
    if not np.iscomplexobj(y):
        raise UffError(f"{where}: FRF values are real; an FRF must be complex (ordinate data type 5 or 6)")
    try:
        x_factor, quantity, factor, unit = frf_units(ds)
    except UffError as exc:
        raise UffError(f"{where}: {exc}") from None
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise UffError(f"{where}: non-finite values")
    freq = x * x_factor
    values = to_accelerance(freq, y.astype(complex) * factor * s_rsp * s_ref, quantity)
    return UffFunction(fname, index, "frf", position, role, reference, response, freq, values, unit)


def read_file(path: str | Path, mapping: Mapping, labels: list[str]) -> UffFile:
    """Every dataset 58 of one file, mapped and in SI; UffError naming file and dataset otherwise."""
    import pyuff  # lazy: only reading or writing UFF files needs it

    path = Path(path)
    if not path.is_file():
        raise UffError(f"{path}: no such file")
    blob = path.read_bytes()
    try:
        uff = pyuff.UFF(str(path))
        types = [int(t) for t in uff.get_set_types()]
    except Exception as exc:  # noqa: BLE001 - pyuff raises bare Exceptions
        raise UffError(f"{path}: not a readable universal file ({exc})") from None
    if not types:
        raise UffError(f"{path}: no universal-file datasets found (not a UFF file, or damaged)")
    if 58 not in types:
        found = ", ".join(str(t) for t in sorted(set(types)))
        raise UffError(f"{path}: no dataset 58 (function at nodal DOF); found dataset type(s) {found}")
    skipped: dict[int, int]  # dataset type -> count
    functions, skipped = [], {}
    for i, t in enumerate(types):
        if t != 58:
            skipped[t] = skipped.get(t, 0) + 1
            continue
        where = f"{path.name} dataset {i + 1}"
        try:
            ds = uff.read_sets(i)
        except Exception:  # noqa: BLE001 - pyuff raises bare Exceptions
            raise UffError(f"{where}: malformed dataset 58 (cannot parse its records)") from None
        functions.append(_function(ds, where, path.name, i, mapping, labels))
    return UffFile(str(path), hashlib.sha256(blob).hexdigest(), functions, skipped)


# ----------------------------------------------------------------------------------------- assembling


def assemble(functions: list[UffFunction], labels: list[str]):
    """Group FRFs by position (order of first appearance) into :class:`MTArrays`; checks the grid."""
    frfs = [f for f in functions if f.kind == "frf"]
    if not frfs:
        raise UffError("no FRF (function type 4) in the files")
    freq = frfs[0].freq
    table: dict[tuple, UffFunction] = {}
    coh: dict[tuple, UffFunction] = {}
    roles: dict[float, str] = {}
    for f in functions:
        if f.freq.shape != freq.shape or not np.allclose(f.freq, freq, rtol=1e-6, atol=1e-9):
            raise UffError(f"{f.file} dataset {f.index + 1}: frequency grid differs from {frfs[0].file} "
                           f"dataset {frfs[0].index + 1} ({f.freq.size} vs {freq.size} lines)")
        key = (f.position, f.input, f.response)
        target = table if f.kind == "frf" else coh
        if key in target:
            raise UffError(f"{f.file} dataset {f.index + 1}: a second {f.kind} for {f.response}/{f.input} at "
                           f"{f.position} m")
        target[key] = f
        if roles.setdefault(f.position, f.role) != f.role:
            raise UffError(f"{f.file} dataset {f.index + 1}: position {f.position} m is both "
                           f"{roles[f.position]} and {f.role}")
    positions = list(dict.fromkeys(f.position for f in frfs))
    inputs = [lb for lb in labels if any(f.input == lb for f in frfs)]
    responses = [lb for lb in labels if any(f.response == lb for f in frfs)]
    missing = [f"{r}/{i} at {p} m" for p in positions for i in inputs for r in responses
               if (p, i, r) not in table]
    if missing:
        raise UffError(f"FRFs missing for {len(missing)} DOF pair(s), e.g. {', '.join(missing[:3])} "
                       "(every position needs every input and response)")
    stray = [k for k in coh if k not in table]
    if stray:
        p, i, r = stray[0]
        raise UffError(f"a coherence for {r}/{i} at {p} m has no FRF")
    with_coh = len(coh) == len(table)
    H, C = [], []
    for p in positions:
        H.append(np.array([[table[(p, i, r)].values for r in responses] for i in inputs]))
        C.append(np.array([[coh[(p, i, r)].values for r in responses] for i in inputs]) if with_coh else None)
    return MTArrays(positions, [roles[p] for p in positions], inputs, responses, freq.copy(), H, C)


# ----------------------------------------------------------------------------------------- session


@dataclass
class ImportResult:
    session_id: str
    store: str
    files: list[dict]
    positions: list[float]
    roles: list[str]
    inputs: list[str]
    responses: int
    n_freq: int
    f_range: tuple[float, float]
    frfs: int
    coherence: bool
    seconds: float

    def as_dict(self) -> dict:
        return {
            "session": self.session_id, "store": self.store, "files": self.files, "positions": self.positions,
            "roles": self.roles, "inputs": self.inputs, "responses": self.responses, "n_freq": self.n_freq,
            "f_range_hz": list(self.f_range), "frfs": self.frfs, "coherence": self.coherence,
            "seconds": round(self.seconds, 3),
        }


def session_config(arrays, base: dict | None) -> dict:
    """The imported session's config: ``base`` (a machine-tool config, or none) with the plan the files
    describe, no simulator and no devices; checked against the rig's schema (ConfigError otherwise)."""
    cfg = {k: v for k, v in (base or {}).items() if k not in ("simulator", "devices")}
    rig = dict(cfg.get("rig") or {"kind": "machine-tool", "name": "uff-import"})
    if rig.get("kind") != "machine-tool":
        raise UffError(f"--config is a {rig.get('kind')!r} config; UFF import needs a machine-tool one")
    rig["simulated"] = False
    cfg["rig"] = rig
    pairs = list(zip(arrays.positions, arrays.roles, strict=True))
    cfg["plan"] = {
        "positions": [p for p, r in pairs if r == "identification"],
        "validation": [p for p, r in pairs if r == "validation"],
        "inputs": list(arrays.inputs),
    }
    typed = parse(cfg, MachineToolConfig, "imported session config")
    a = typed.analysis
    f = arrays.freq
    if a.f_min < f.min() or a.f_max > f.max():
        raise UffError(f"analysis band {a.f_min:g}-{a.f_max:g} Hz is outside the files' "
                       f"{f.min():g}-{f.max():g} Hz (set [analysis] f_min/f_max in a --config)")
    return cfg


def write_session(store, arrays, config: dict, files: list[UffFile]) -> str:
    """Create a complete machine-tool session from checked arrays; all messages in one commit."""
    coh = all(c is not None for c in arrays.coherence)
    channels = ["freq"] + [f"{lb}.{part}" for lb in arrays.labels for part in ("re", "im")]
    units = ["Hz"] + [FRF_UNIT] * (2 * len(arrays.labels))
    if coh:
        channels += [f"{lb}.coh" for lb in arrays.labels]
        units += ["1"] * len(arrays.labels)
    devices = {"uff": {"format": "UFF 58", "files": [{"file": Path(f.path).name, "sha256": f.sha256}
                                                     for f in files]}}
    seq: dict[str, int] = {}

    def nxt(stream: str) -> int:
        seq[stream] = seq.get(stream, -1) + 1
        return seq[stream]

    saved = store.flush_interval
    store.flush_interval = math.inf  # one transaction at finish(): no half session on a failure
    sid = store.create_session("machine-tool", config, devices)
    try:
        t0 = time.time()
        row = 0
        for f in files:
            store.append(sid, Event("mt.import", "uff_file", nxt("mt.import"), t0, {
                "file": f.path, "sha256": f.sha256, "datasets_58": len(f.functions),
                "skipped": {str(k): v for k, v in f.skipped.items()}}))
        n = arrays.freq.size
        for k, (p, role) in enumerate(zip(arrays.positions, arrays.roles, strict=True)):
            t = t0 + row * ROW_DT
            store.append(sid, Event(PLAN_STREAM, "position_start", nxt(PLAN_STREAM), t,
                                    {"position": p, "role": role}))
            for i, dof in enumerate(arrays.inputs):
                t = t0 + row * ROW_DT
                body = {"position": p, "role": role, "input": dof, "n": n, "unit": FRF_UNIT}
                store.append(sid, Event(PLAN_STREAM, "frf_start", nxt(PLAN_STREAM), t, body))
                h = arrays.H[k][i]  # (n_resp, n_freq)
                cols = [arrays.freq] + [part for r in h for part in (r.real, r.imag)]
                if coh:
                    cols += list(arrays.coherence[k][i])
                data = np.ascontiguousarray(np.column_stack(cols), dtype=np.float64)
                store.append(sid, Frame(FRF_STREAM, nxt(FRF_STREAM), t, ROW_DT, channels, units, data))
                row += n
            store.append(sid, Event(PLAN_STREAM, "position_end", nxt(PLAN_STREAM), t0 + row * ROW_DT,
                                    {"position": p, "role": role}))
        store.finish(sid, "complete", "imported from UFF 58")
    except BaseException as exc:
        with contextlib.suppress(Exception):
            store.finish(sid, "aborted", f"UFF import failed: {exc}")
        raise
    finally:
        store.flush_interval = saved
    return sid


@dataclass
class PreparedImport:
    """Files read and checked, session config built: what :func:`write_session` needs."""

    arrays: MTArrays
    config: dict
    files: list[UffFile]
    frfs: int
    seconds: float


def prepare_import(paths: list[str | Path], *, config: dict | None = None,
                   map_file: str | Path | None = None) -> PreparedImport:
    """Read every file, map and convert its datasets, assemble and check; touches no store."""
    began = time.perf_counter()
    if not paths:
        raise UffError("no files given")
    labels = model_labels()
    mapping = load_mapping(map_file, labels)
    files = [read_file(p, mapping, labels) for p in paths]
    functions = [f for uf in files for f in uf.functions]
    arrays = assemble(functions, labels)
    cfg = session_config(arrays, config)
    return PreparedImport(arrays, cfg, files, sum(f.kind == "frf" for f in functions),
                          time.perf_counter() - began)


def import_uff(store, paths: list[str | Path], *, config: dict | None = None,
               map_file: str | Path | None = None, prepared: PreparedImport | None = None) -> ImportResult:
    """Read UFF 58 files, check them whole, then write one machine-tool session (see the module doc)."""
    began = time.perf_counter()
    prep = prepared or prepare_import(paths, config=config, map_file=map_file)
    arrays = prep.arrays
    sid = write_session(store, arrays, prep.config, prep.files)
    return ImportResult(
        sid, str(store.path),
        [{"file": f.path, "datasets_58": len(f.functions), "skipped": f.skipped} for f in prep.files],
        arrays.positions, arrays.roles, arrays.inputs, len(arrays.labels), int(arrays.freq.size),
        (float(arrays.freq[0]), float(arrays.freq[-1])), prep.frfs,
        all(c is not None for c in arrays.coherence),
        time.perf_counter() - began + (prep.seconds if prepared is not None else 0.0),
    )
