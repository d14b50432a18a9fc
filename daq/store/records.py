"""What the store hands out: sessions, streams, their timing and the samples read from them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Statuses of a session; a writer ends it with one of the final ones.
STATUSES = ("running", "complete", "aborted", "incomplete")
FINAL_STATUSES = ("complete", "aborted", "incomplete")


@dataclass
class StreamInfo:
    """Metadata of one stream of a session."""

    name: str
    type: str  # "frame" or "event"
    channels: list[str]
    units: list[str]
    dtype: str | None
    dt: float | None  # nominal sample period, s (None: explicit timestamps or events)
    n_messages: int
    n_samples: int
    t_first: float | None
    t_last: float | None
    monotonic: bool = True  # sample times never go back (time windows are sample ranges)
    timing: StreamTiming | None = None  # filled by SessionReader.stream_timing (hil show)

    @property
    def rate(self) -> float | None:
        """Sample rate, Hz (from dt, or estimated from the time span)."""
        if self.dt:
            return 1.0 / self.dt
        if self.type == "frame" and self.n_samples > 1 and self.t_last and self.t_first is not None:
            span = self.t_last - self.t_first
            return (self.n_samples - 1) / span if span > 0 else None
        return None


@dataclass
class StreamTiming:
    """The real sample spacing of a frame stream, from the sample times of its first frames.

    A press sensor stream comes in bursts (a block of readings 0.5 ms apart, then nothing while the
    force is corrected), so its mean rate says little; ``spacing_s`` is the median spacing inside
    frames, ``frame_period_s`` the median time between frame starts.
    """

    spacing_s: float | None
    samples_per_frame: int
    frame_period_s: float | None
    mean_rate_hz: float | None
    frames_sampled: int

    @property
    def rate_hz(self) -> float | None:
        return 1.0 / self.spacing_s if self.spacing_s else None

    @property
    def bursty(self) -> bool:
        """True when frames are separated by gaps much longer than their own duration."""
        if not (self.spacing_s and self.frame_period_s) or self.samples_per_frame < 1:
            return False
        return self.frame_period_s > 1.5 * self.samples_per_frame * self.spacing_s

    def describe(self) -> str:
        if not self.rate_hz:
            return "irregular"
        if self.bursty:
            assert self.frame_period_s is not None  # bursty needs it
            mean = f" (mean {_num(self.mean_rate_hz)} Hz)" if self.mean_rate_hz else ""
            return (
                f"bursts of {self.samples_per_frame} at {_num(self.rate_hz)} Hz "
                f"every {_num(self.frame_period_s)} s{mean}"
            )
        return f"{_num(self.rate_hz)} Hz"


@dataclass
class SessionInfo:
    """One session: identity, status, times, config snapshot, versions, devices, streams."""

    id: str
    kind: str
    status: str
    reason: str | None
    started: float
    ended: float | None
    config: dict
    software_version: str
    devices: dict
    streams: dict[str, StreamInfo] = field(default_factory=dict)
    writer_host: str | None = None
    writer_pid: int | None = None
    heartbeat: float | None = None
    stats: dict | None = None


@dataclass
class StreamData:
    """All samples of one stream: ``t`` (n,) s, ``data`` (n, n_channels)."""

    stream: str
    t: np.ndarray
    data: np.ndarray
    channels: list[str]
    units: list[str]
    start: int = 0  # index of the first sample in the stream (contiguous reads)
    index: np.ndarray | None = None  # sample indices, when the samples are not a contiguous range

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def sample_index(self) -> np.ndarray:
        """Index of every sample in its stream (frames concatenated in arrival order)."""
        if self.index is not None:
            return self.index
        return np.arange(self.start, self.start + len(self), dtype=np.int64)

    def column(self, channel: str) -> np.ndarray:
        try:
            return self.data[:, self.channels.index(channel)]
        except ValueError:
            raise KeyError(
                f"stream {self.stream!r} has no channel {channel!r} (has {self.channels})"
            ) from None

    def unit(self, channel: str) -> str:
        return self.units[self.channels.index(channel)]


def _num(x: float) -> str:
    """Four significant digits without exponent noise (sample times at unix-time magnitude carry
    ~0.2 us of rounding, so more digits would only show that)."""
    return f"{float(f'{x:.4g}'):g}"
