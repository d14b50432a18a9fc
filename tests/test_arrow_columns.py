"""The push's tables as Arrow without pandas: columns go to Arrow and come back equal (the digest the push
compares is the same), as a Tiled server hands them back (NaN as null, sliced, in several chunks), and
pandas is never imported."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daq.lab.arrow_columns import from_arrow, to_arrow
from daq.lab.checks import table_sha256
from tests.test_lab import ROOT

pa = pytest.importorskip("pyarrow")


def through_ipc(table):
    """The table written as an Arrow file and read back, as it travels to and from the lab."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_file(io.BytesIO(sink.getvalue().to_pybytes())).read_all()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
                          st.text(max_size=30)), min_size=1, max_size=40))
def test_columns_come_back_equal_with_the_same_digest(rows):
    cols = {"ord": np.array([r[0] for r in rows], dtype=np.int64),
            "t": np.array([r[1] for r in rows], dtype=np.float64),
            "body": np.array([r[2] for r in rows], dtype=object)}
    back = from_arrow(through_ipc(to_arrow(cols)), list(cols))
    assert back["ord"].dtype == np.int64 and np.array_equal(back["ord"], cols["ord"])
    assert np.array_equal(back["t"], cols["t"], equal_nan=True)
    assert list(back["body"]) == list(cols["body"])
    assert table_sha256(back) == table_sha256(cols)


def test_a_table_as_the_lab_returns_it_sliced_chunked_and_with_nan_as_null_reads_the_same():
    cols = {"n": np.arange(10, dtype=np.int64), "dt": np.array([0.5, np.nan] * 5),
            "kind": np.array(["started", "", "ßtop", "x"] * 2 + ["a", "b"], dtype=object)}
    table = to_arrow(cols)
    # what pandas hands back: NaN as null, the table in two record batches, the second one an offset slice
    nulls = pa.array([0.5, None] * 5, type=pa.float64())
    served = pa.Table.from_arrays([table.column("n"), nulls, table.column("kind").cast(pa.string())],
                                  names=list(cols))
    served = pa.concat_tables([served.slice(0, 3), served.slice(3)])
    assert served.column("dt").num_chunks == 2 and served.column("dt").chunks[1].offset == 3
    back = from_arrow(through_ipc(served), list(cols))
    assert table_sha256(back) == table_sha256(cols)


def test_a_column_that_cannot_be_ours_is_refused_not_misread():
    ints = pa.Table.from_arrays([pa.array([1, None, 3], type=pa.int64())], names=["n"])
    with pytest.raises(ValueError, match="nulls"):
        from_arrow(ints, ["n"])
    other = pa.Table.from_arrays([pa.array([True, False])], names=["flag"])
    with pytest.raises(ValueError, match="type"):
        from_arrow(other, ["flag"])


def test_the_tables_travel_without_importing_pandas():
    code = ("import sys, numpy as np; from daq.lab.arrow_columns import to_arrow, from_arrow; "
            "t = to_arrow({'a': np.arange(3.0), 'b': np.array(['x', 'y', 'z'], dtype=object)}); "
            "c = from_arrow(t, ['a', 'b']); print(t.num_rows, list(c['b']), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "['x',", "'y',", "'z']", "False"], out.stdout + out.stderr
