"""What the dashboard draws from, as plain numbers: a stored stream reduced to buckets with its min/max
envelope and gaps kept (GET /api/sessions/{id}/series), and the live relay's envelope of what it decimated
- a spike between two kept samples stays visible (issue 33 item 8)."""

from __future__ import annotations

import numpy as np

from daq.bus.frames import Frame
from daq.serve.relay import _Decimator
from daq.serve.series import buckets_of, reduce, with_gaps


def test_buckets_keep_the_extremes_and_leave_nan_out():
    t = np.arange(10) * 0.1
    data = np.c_[np.arange(10.0), np.zeros(10)]
    data[3, 0], data[7, 1] = np.nan, 50.0  # a lost sample, and a spike a decimated line would drop
    tb, mean, lo, hi = reduce(t, data, buckets_of(10, 3))
    assert buckets_of(10, 3) == 4 and tb.tolist() == [0.0, 0.4, 0.8]
    assert mean[:, 0].tolist() == [(0 + 1 + 2) / 3, 5.5, 8.5]
    assert lo[:, 0].tolist() == [0, 4, 8] and hi[:, 0].tolist() == [2, 7, 9]
    assert hi[:, 1].tolist() == [0, 50, 0]


def test_a_jump_in_time_becomes_a_row_of_nan_and_regular_steps_do_not():
    t = np.r_[np.arange(5) * 0.01, 2 + np.arange(3) * 0.01]
    tg, yg = with_gaps(t, np.arange(8.0)[:, None], spacing=None)
    assert len(tg) == 9 and np.isnan(yg[5, 0]) and np.all(np.diff(tg) > 0)
    assert len(with_gaps(np.arange(5) * 0.01, np.zeros((5, 1)), spacing=0.01)[0]) == 5


def test_the_relay_sends_the_envelope_of_what_it_dropped():
    n = 1000  # 1000 samples at 10 kHz: decimated to 500 per second = 50 kept
    data = np.zeros((n, 1))
    data[510, 0] = 7.0  # between two kept samples (one every 20)
    frame = Frame("s.x", 0, 100.0, 1e-4, ["x"], ["m"], data)
    t, kept, lo, hi = _Decimator().pick(frame)
    assert len(t) == 50 and kept.max() == 0.0  # the line alone misses the spike
    assert hi is not None and hi.max() == 7.0 and lo.min() == 0.0 and hi.shape == kept.shape
    t2, kept2, lo2, hi2 = _Decimator().pick(Frame("s.x", 0, 100.0, 0.01, ["x"], ["m"], data[:10]))
    assert len(t2) == 10 and lo2 is None and hi2 is None  # nothing dropped: no envelope
