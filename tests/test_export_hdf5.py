"""The HDF5 export's fast path (issue 23): whole dataset chunks written as raw bytes, and store chunks
read into one reused pair of arrays. Both must leave the file's content exactly as the plain
``ds[a:b] = rows`` writes of fresh arrays would, whatever the dtype, offsets, chunking and filters."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from daq.bus.frames import Frame
from daq.export.hdf5_files import WholeChunks, whole_chunks, write_rows
from daq.export.session_export import export
from daq.store.read_write import SessionStore

DTYPES = [np.float64, np.float32, np.int16, np.int64, np.bool_]


def _draw(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [None, 1, 3])
def test_whole_chunk_writes_equal_slice_writes(tmp_path, rng, dtype, width):
    """Rows written at offsets that start and end inside chunks, on chunk boundaries and across many
    chunks: the raw-chunk path and ``ds[a:b] = rows`` give the same dataset, element for element."""
    n, rows = 1000, 64
    shape = (n,) if width is None else (n, width)
    data = _draw(rng, shape, dtype)
    cuts = [0, 5, 64, 64, 70, 200, 256, 257, 640, 999, 1000]  # an empty write too (64, 64)
    with h5py.File(tmp_path / "fast.h5", "w") as fast, h5py.File(tmp_path / "plain.h5", "w") as plain:
        layout = {"dtype": dtype, "chunks": (rows, *shape[1:]), "maxshape": (None, *shape[1:])}
        a = fast.create_dataset("x", shape, **layout)
        b = plain.create_dataset("x", shape, **layout)
        whole = whole_chunks(a)
        assert whole == WholeChunks(rows, np.dtype(dtype))
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            write_rows(a, lo, data[lo:hi], whole)
            b[lo:hi] = data[lo:hi]
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a[()], data)
        np.testing.assert_array_equal(a[()], b[()])


def test_filtered_or_partly_chunked_datasets_and_other_dtypes_take_the_plain_path(tmp_path, rng):
    """gzip/shuffle chunks are not raw rows, nor are chunks narrower than a row; rows of another dtype
    are converted by HDF5 - all through ``ds[a:b] = rows``, with the values HDF5 would store."""
    data = rng.standard_normal((300, 4))
    with h5py.File(tmp_path / "f.h5", "w") as f:
        gz = f.create_dataset("gz", (300, 4), dtype="f8", chunks=(50, 4), compression="gzip", shuffle=True)
        narrow = f.create_dataset("narrow", (300, 4), dtype="f8", chunks=(50, 2))
        contiguous = f.create_dataset("contiguous", (300, 4), dtype="f8")
        assert whole_chunks(gz) is None and whole_chunks(narrow) is None and whole_chunks(contiguous) is None
        single = f.create_dataset("single", (300, 4), dtype="f4", chunks=(50, 4))
        whole = whole_chunks(single)
        assert whole == WholeChunks(50, np.dtype("f4"))
        write_rows(gz, 0, data, None)
        write_rows(single, 0, data, whole)  # float64 rows into a float32 dataset: converted, not raw bytes
        np.testing.assert_array_equal(gz[()], data)
        np.testing.assert_array_equal(single[()], data.astype(np.float32))


def test_reused_chunks_hold_the_same_samples_as_fresh_ones(tmp_path, rng):
    """``iter_stream(reuse=True)``: every chunk (the last, shorter one too) has the samples of the fresh
    chunk at the same place, while consecutive chunks share their arrays (nothing allocated per chunk)."""
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("bench", {"rig": {"kind": "bench"}})
    for k, n in enumerate([700, 0, 333, 1000, 45, 910]):
        data = rng.normal(size=(n, 2))
        store.append(sid, Frame("x.y", k, 10.0 + k * 0.1, 1e-4, ["a", "b"], ["V", "A"], data))
    store.finish(sid, "complete")
    fresh = list(store.iter_stream(sid, "x.y", 256))
    reused, arrays = [], set()
    for chunk in store.iter_stream(sid, "x.y", 256, reuse=True):
        reused.append((chunk.start, chunk.t.copy(), chunk.data.copy()))
        arrays.add(chunk.data.__array_interface__["data"][0])
    assert len(arrays) == 1  # one buffer for all of them
    assert [s for s, _, _ in reused] == [c.start for c in fresh] == list(range(0, 2988, 256))
    for (_, t, data), c in zip(reused, fresh, strict=True):
        np.testing.assert_array_equal(t, c.t)
        np.testing.assert_array_equal(data, c.data)
    store.close()


@pytest.mark.parametrize("compress", [False, True])
def test_export_equals_plain_h5py_of_the_stored_arrays(tmp_path, rng, compress):
    """A session whose frames straddle the dataset chunks (3 channels: 43690-row chunks at the default
    size, 512-row ones here), exported: the same values, dtypes, chunk shapes and filters as h5py
    writing the stored arrays in one call with that layout."""
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("bench", {"rig": {"kind": "bench"}})
    for k in range(9):
        n = int(rng.integers(100, 400))
        data = rng.normal(size=(n, 3))
        store.append(sid, Frame("x.f", k, 1.7e9 + k, 1e-3, ["a", "b", "c"], ["N", "m", "Pa"], data))
        ts = 1.7e9 + k + np.cumsum(rng.uniform(1e-4, 1e-3, 150))
        counts = rng.integers(-9, 9, (150, 1)).astype(np.int16)
        store.append(sid, Frame("x.i", k, ts[0], None, ["k"], ["1"], counts, timestamps=ts))
    store.finish(sid, "complete")
    out = export(store, sid, "hdf5", tmp_path / "e.h5", chunk_samples=512, compress=compress).path
    filters = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if compress else {}
    with h5py.File(out) as f, h5py.File(tmp_path / "plain.h5", "w") as p:
        for name in ("x.f", "x.i"):
            sd = store.read_stream(sid, name)
            got_t, got_d = f[f"streams/{name}/t"], f[f"streams/{name}/data"]
            rows = min(512, len(sd))
            ref_t = p.create_dataset(f"{name}/t", data=sd.t, chunks=(rows,), maxshape=(None,), **filters)
            width = sd.data.shape[1]
            ref_d = p.create_dataset(
                f"{name}/data", data=sd.data, chunks=(rows, width), maxshape=(None, width), **filters
            )
            for got, ref in ((got_t, ref_t), (got_d, ref_d)):
                assert (got.dtype, got.shape, got.chunks) == (ref.dtype, ref.shape, ref.chunks)
                assert got.maxshape == ref.maxshape
                assert (got.compression, got.shuffle) == (ref.compression, ref.shuffle)
                np.testing.assert_array_equal(got[()], ref[()])
    store.close()
