"""Columns of numbers and text as an Arrow table and back, through Arrow's buffers.

A push writes two small tables (frames, events) and reads them back. pyarrow imports pandas for any
conversion from or to Python or numpy objects (``pa.array``, ``to_numpy``, ``to_pylist``), which is half
a second of CPU and about 50 MB in every push process; building the arrays from their buffers, and
reading the buffers back with numpy, needs none of it.
"""

from __future__ import annotations

import numpy as np

#: numpy kinds of number columns -> Arrow's types by name (made lazily, pyarrow is imported on use).
NUMBER_TYPES = {"f8": "float64", "f4": "float32", "i8": "int64", "i4": "int32", "u8": "uint64",
                "u4": "uint32"}


def _pa():
    import pyarrow as pa  # type: ignore[import-untyped]  # lazy: only the push writes tables

    return pa


def to_arrow(columns: dict[str, np.ndarray]):
    """An Arrow table of ``columns``: numbers as they are (little-endian), text (object/str arrays)
    as UTF-8 strings."""
    pa = _pa()
    arrays = []
    for col in columns.values():
        arr = np.asarray(col)
        if arr.dtype.kind in "OUS":
            arrays.append(_strings(pa, [str(v) for v in arr]))
            continue
        name = f"{arr.dtype.kind}{arr.dtype.itemsize}"
        if name not in NUMBER_TYPES:
            raise TypeError(f"no Arrow column for numpy {arr.dtype}")
        data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        arrays.append(pa.Array.from_buffers(getattr(pa, NUMBER_TYPES[name])(), len(data),
                                            [None, pa.py_buffer(data)]))
    return pa.Table.from_arrays(arrays, names=list(columns))


def _strings(pa, values: list[str]):
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype="<i8")
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def from_arrow(table, names: list[str]) -> dict[str, np.ndarray]:
    """The columns ``names`` of an Arrow table as numpy arrays: numbers as they are, text as object
    arrays of str; a null in a float column is NaN (Tiled stores tables through pandas, which writes NaN
    as null). ValueError for a column with other nulls or of another type (it cannot equal ours)."""
    pa = _pa()
    out = {}
    for name in names:
        parts = [_chunk(pa, chunk) for chunk in table.column(name).chunks]
        kinds = {p.dtype.kind for p in parts}
        if not parts:
            out[name] = np.array([], dtype=object)
        elif kinds == {"O"}:
            out[name] = np.concatenate(parts)
        else:
            out[name] = np.concatenate(parts).astype(parts[0].dtype, copy=False)
    return out


def _chunk(pa, chunk) -> np.ndarray:
    kind = chunk.type
    n, first = len(chunk), chunk.offset
    buffers = chunk.buffers()
    if chunk.null_count:  # a float column's NaN comes back from the lab's tables as null: NaN again
        if kind not in (pa.float64(), pa.float32()):
            raise ValueError("a column with nulls")
        bits = np.unpackbits(np.frombuffer(buffers[0], dtype=np.uint8), bitorder="little")[first:first + n]
        values = np.frombuffer(buffers[1], dtype="<f8" if kind == pa.float64() else "<f4", count=n,
                               offset=first * (8 if kind == pa.float64() else 4)).copy()
        values[bits == 0] = np.nan
        return values
    if kind in (pa.string(), pa.large_string()):
        width = 4 if kind == pa.string() else 8
        offsets = np.frombuffer(buffers[1], dtype=f"<i{width}", count=n + 1, offset=first * width)
        data = buffers[2].to_pybytes() if buffers[2] is not None else b""
        return np.array([data[offsets[k]:offsets[k + 1]].decode("utf-8") for k in range(n)], dtype=object)
    for code, type_name in NUMBER_TYPES.items():
        if kind == getattr(pa, type_name)():
            dtype = np.dtype("<" + code)
            return np.frombuffer(buffers[1], dtype=dtype, count=n, offset=first * dtype.itemsize)
    raise ValueError("a column of a type the push does not write")
