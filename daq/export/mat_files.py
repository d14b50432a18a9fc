"""MATLAB .mat writers that fill big arrays chunk by chunk, so memory does not grow with the data.

Both writers take the file's variables up front as plain values: ``dict`` (struct), ``list``
(column cell), ``str`` (char row), numbers and 2-D numpy arrays, plus :class:`Column`
placeholders (objects with ``key``, ``rows``, ``cols``, ``dtype``) whose rows are written later
with :meth:`write_rows`. MATLAB stores arrays column-major; the writers place each block of rows
where it belongs.

* :class:`MatV5Writer` - the classic format (MAT-File Format, level 5), written by hand and
  uncompressed: every element's size is known in advance, so a placeholder is a reserved byte range
  filled by seeking. scipy's ``savemat`` needs every array whole in memory, hence our own writer.
  A top-level variable must stay below 2 GB (MATLAB's limit for v5/v7 files).
* :class:`MatV73Writer` - MATLAB v7.3: an HDF5 file behind a 512-byte MATLAB header (userblock),
  with the ``MATLAB_class`` attributes MATLAB reads, written with h5py. Placeholders are chunked
  datasets. hdf5storage (also installed) writes whole arrays only, so it could not stream.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np

_MI = {
    "int8": 1,
    "uint8": 2,
    "int16": 3,
    "uint16": 4,
    "int32": 5,
    "uint32": 6,
    "float32": 7,
    "float64": 9,
    "int64": 12,
    "uint64": 13,
    "bool": 2,
}
_MX = {
    "float64": 6,
    "float32": 7,
    "int8": 8,
    "uint8": 9,
    "int16": 10,
    "uint16": 11,
    "int32": 12,
    "uint32": 13,
    "int64": 14,
    "uint64": 15,
    "bool": 9,
}
_MX_CLASS_NAME = {"float64": "double", "float32": "single", "bool": "logical"}
MI_INT8, MI_INT32, MI_UINT32, MI_MATRIX, MI_UTF8 = 1, 5, 6, 14, 16
MX_CELL, MX_STRUCT, MX_CHAR = 1, 2, 4
LOGICAL_FLAG = 0x200
FIELD_NAME_LENGTH = 64  # 63 characters + NUL, the longest MATLAB identifier


def _pad(n: int) -> int:
    return (-n) % 8


def _header_text(version: str, created: float | None) -> bytes:
    when = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(created if created is not None else time.time()))
    schema = " HDF5 schema 1.00 ." if version == "7.3" else ""
    text = f"MATLAB {version} MAT-file, Platform: hil-lab, Created on: {when} UTC{schema}".encode("ascii")
    return text[:116].ljust(116, b" ")


def _matrix(value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        arr = arr.reshape(1, 1)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.dtype.name not in _MX:
        arr = arr.astype(np.float64)
    return arr


def _is_column(value) -> bool:
    return hasattr(value, "key") and hasattr(value, "rows") and hasattr(value, "cols")


class MatV5Writer:
    """Writes a level-5 MAT file whose big arrays are filled later (see module docstring)."""

    def __init__(
        self, path: str | Path, variables: dict, created: float | None = None, compress: bool = False
    ):
        self.path = Path(path)
        self._columns: dict[str, tuple[int, int, int, np.dtype]] = {}
        self._f = open(self.path, "w+b")  # noqa: SIM115 - closed in close()
        try:
            self._f.write(_header_text("5.0", created) + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM")
            for name, value in variables.items():
                self._element(value, name)
            self._end = self._f.tell()
        except BaseException:
            self._f.close()
            raise

    # sizes --------------------------------------------------------------------------------

    @classmethod
    def element_size(cls, value, name: str = "") -> int:
        """Bytes of the miMATRIX element holding ``value`` (tag included)."""
        n_name = len(name.encode("ascii"))
        size = 8 + 16 + 16 + 8 + n_name + _pad(n_name)  # tag, flags, dims, name
        if isinstance(value, dict):
            n = FIELD_NAME_LENGTH * len(value)
            size += 8 + 8 + n + _pad(n) + sum(cls.element_size(v) for v in value.values())
        elif isinstance(value, list):
            size += sum(cls.element_size(v) for v in value)
        else:
            n = cls._data_bytes(value)
            size += 8 + n + _pad(n)
        return size

    @staticmethod
    def _data_bytes(value) -> int:
        if isinstance(value, str):
            return len(value.encode("utf-8"))
        if _is_column(value):
            return value.rows * value.cols * np.dtype(value.dtype).itemsize
        return _matrix(value).nbytes

    # writing ------------------------------------------------------------------------------

    def _tag(self, mi: int, n: int) -> None:
        self._f.write(struct.pack("<II", mi, n))

    def _data(self, mi: int, payload: bytes) -> None:
        self._tag(mi, len(payload))
        self._f.write(payload + b"\0" * _pad(len(payload)))

    def _head(self, mx: int, dims: tuple[int, int], name: str) -> None:
        self._data(MI_UINT32, struct.pack("<II", mx, 0))
        self._data(MI_INT32, struct.pack("<ii", *dims))
        self._data(MI_INT8, name.encode("ascii"))

    def _element(self, value, name: str = "") -> None:
        size = self.element_size(value, name)
        start = self._f.tell()
        self._tag(MI_MATRIX, size - 8)
        if isinstance(value, dict):
            self._head(MX_STRUCT, (1, 1), name)
            self._f.write(struct.pack("<HHi", MI_INT32, 4, FIELD_NAME_LENGTH))  # small element
            names = b"".join(
                k.encode("ascii")[: FIELD_NAME_LENGTH - 1].ljust(FIELD_NAME_LENGTH, b"\0") for k in value
            )
            self._data(MI_INT8, names)
            for v in value.values():
                self._element(v)
        elif isinstance(value, list):
            self._head(MX_CELL, (len(value), 1), name)
            for v in value:
                self._element(v)
        elif isinstance(value, str):  # UTF-8 data, dimensions in characters (as scipy writes chars)
            self._head(MX_CHAR, (1, len(value)) if value else (0, 0), name)
            self._data(MI_UTF8, value.encode("utf-8"))
        elif _is_column(value):
            dt = np.dtype(value.dtype)
            self._f.write(
                struct.pack("<IIII", MI_UINT32, 8, _MX[dt.name] | (LOGICAL_FLAG * (dt.name == "bool")), 0)
            )
            self._data(MI_INT32, struct.pack("<ii", value.rows, value.cols))
            self._data(MI_INT8, name.encode("ascii"))
            n = value.rows * value.cols * dt.itemsize
            self._tag(_MI[dt.name], n)
            self._columns[value.key] = (self._f.tell(), value.rows, value.cols, dt.newbyteorder("<"))
            self._f.seek(n + _pad(n), 1)  # reserved, filled by write_rows
        else:
            arr = _matrix(value)
            flags = _MX[arr.dtype.name] | (LOGICAL_FLAG * (arr.dtype.name == "bool"))
            self._f.write(struct.pack("<IIII", MI_UINT32, 8, flags, 0))
            self._data(MI_INT32, struct.pack("<ii", *arr.shape))
            self._data(MI_INT8, name.encode("ascii"))
            self._data(_MI[arr.dtype.name], arr.astype(arr.dtype.newbyteorder("<")).tobytes(order="F"))
        if self._f.tell() != start + size:  # the size rule and the writer must agree exactly
            raise AssertionError(f"MAT element {name!r}: wrote {self._f.tell() - start} bytes, sized {size}")

    def write_rows(self, key: str, row0: int, block: np.ndarray) -> None:
        """Write rows ``row0 .. row0 + len(block)`` of placeholder ``key`` (column-major in the file)."""
        offset, rows, cols, dt = self._columns[key]
        block = np.asarray(block)
        if block.ndim == 1:
            block = block.reshape(-1, 1)
        m = block.shape[0]
        if row0 < 0 or row0 + m > rows or block.shape[1] != cols:
            raise ValueError(f"rows {row0}..{row0 + m} x {block.shape[1]} do not fit {key} ({rows} x {cols})")
        cols_first = np.ascontiguousarray(block.T, dtype=dt)
        for c in range(cols):
            self._f.seek(offset + (c * rows + row0) * dt.itemsize)
            self._f.write(cols_first[c].tobytes())

    def close(self) -> None:
        if not self._f.closed:
            self._f.truncate(self._end)  # the file ends after the last reserved range
            self._f.close()

    def __enter__(self) -> MatV5Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class MatV73Writer:
    """Writes a MATLAB v7.3 file (HDF5 with MATLAB's header) whose big arrays are filled later."""

    def __init__(
        self, path: str | Path, variables: dict, created: float | None = None, compress: bool = False
    ):
        import h5py

        self._h5py = h5py
        self.path = Path(path)
        self._created = created
        self._filters = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if compress else {}
        self._columns: dict = {}
        self._f = h5py.File(self.path, "w", userblock_size=512, libver="earliest")
        try:
            self._refs = None
            for name, value in variables.items():
                self._put(self._f, name, value)
        except BaseException:
            self._f.close()
            raise

    def _class(self, ds, name: str) -> None:
        ds.attrs["MATLAB_class"] = np.bytes_(_MX_CLASS_NAME.get(name, name))
        if name == "bool":
            ds.attrs["MATLAB_int_decode"] = np.int32(1)

    def _empty(self, parent, name: str, dims: tuple[int, int], cls: str):
        ds = parent.create_dataset(name, data=np.array(dims, dtype=np.uint64))
        ds.attrs["MATLAB_class"] = np.bytes_(cls)
        ds.attrs["MATLAB_empty"] = np.uint8(1)
        return ds

    def _put(self, parent, name: str, value) -> None:
        h5py = self._h5py
        if isinstance(value, dict):
            g = parent.create_group(name)
            g.attrs["MATLAB_class"] = np.bytes_("struct")
            fields = np.empty(len(value), dtype=object)
            fields[:] = [np.frombuffer(k.encode("ascii"), dtype="S1") for k in value]
            g.attrs.create("MATLAB_fields", fields, dtype=h5py.vlen_dtype(np.dtype("S1")))
            for k, v in value.items():
                self._put(g, k, v)
        elif isinstance(value, list):
            if not value:
                self._empty(parent, name, (0, 0), "cell")
                return
            refs = np.empty((1, len(value)), dtype=h5py.ref_dtype)  # MATLAB (n, 1), stored transposed
            for i, v in enumerate(value):
                refs[0, i] = self._ref(v)
            parent.create_dataset(name, data=refs).attrs["MATLAB_class"] = np.bytes_("cell")
        elif isinstance(value, str):
            codes = np.frombuffer(value.encode("utf-16-le"), dtype="<u2")
            if not codes.size:
                ds = self._empty(parent, name, (0, 0), "char")
            else:
                ds = parent.create_dataset(name, data=codes.reshape(-1, 1))
                ds.attrs["MATLAB_class"] = np.bytes_("char")
            ds.attrs["MATLAB_int_decode"] = np.int32(2)
        elif _is_column(value):
            dt = np.dtype(value.dtype)
            if value.rows == 0 or value.cols == 0:
                self._empty(parent, name, (value.rows, value.cols), _MX_CLASS_NAME.get(dt.name, dt.name))
                # no dataset to fill, but its rows still arrive (n x 0 blocks of a stream without channels)
                self._columns[value.key] = (value.rows, value.cols)
                return
            store = np.dtype(np.uint8) if dt.name == "bool" else dt
            rows = max(1, min(value.rows, (1 << 20) // (value.cols * store.itemsize)))
            ds = parent.create_dataset(
                name, shape=(value.cols, value.rows), dtype=store, chunks=(value.cols, rows), **self._filters
            )
            self._class(ds, dt.name)
            self._columns[value.key] = ds
        else:
            arr = _matrix(value)
            if arr.size == 0:
                self._empty(parent, name, arr.shape, _MX_CLASS_NAME.get(arr.dtype.name, arr.dtype.name))
                return
            data = arr.astype(np.uint8) if arr.dtype == np.bool_ else arr
            ds = parent.create_dataset(name, data=np.ascontiguousarray(data.T))
            self._class(ds, arr.dtype.name)

    def _ref(self, value):
        if self._refs is None:
            self._refs = self._f.create_group("#refs#")
        name = f"r{len(self._refs)}"
        self._put(self._refs, name, value)
        return self._refs[name].ref

    def write_rows(self, key: str, row0: int, block: np.ndarray) -> None:
        """Write rows ``row0 .. row0 + len(block)`` of placeholder ``key``."""
        ds = self._columns[key]
        block = np.asarray(block)
        if block.ndim == 1:
            block = block.reshape(-1, 1)
        if isinstance(ds, tuple):  # an empty placeholder (MATLAB_empty): only blocks without values fit
            rows, cols = ds
            if block.size or row0 < 0 or row0 + block.shape[0] > rows or block.shape[1] != cols:
                raise ValueError(f"rows {row0}..{row0 + block.shape[0]} x {block.shape[1]} do not fit {key} "
                                 f"({rows} x {cols})")
            return
        if block.dtype == np.bool_:
            block = block.astype(np.uint8)
        ds[:, row0 : row0 + block.shape[0]] = block.T

    def close(self) -> None:
        if not self._f.id.valid:
            return
        self._f.close()
        header = _header_text("7.3", self._created) + b"\0" * 8 + struct.pack("<H", 0x0200) + b"IM"
        with open(self.path, "r+b") as f:  # MATLAB's 128-byte header in HDF5's userblock
            f.write(header.ljust(512, b"\0"))

    def __enter__(self) -> MatV73Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
