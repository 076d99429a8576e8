"""Measurement Set reading with python-casacore, streamed in chunks of rows.

A :class:`MeasurementSet` reads the metadata once (phase centre from the
FIELD table, channel frequencies per spectral window, correlation types per
polarisation setup) and then yields :class:`VisChunk` objects of Stokes I
visibilities, weights and flags, ``chunk_rows`` rows at a time, so a set
larger than memory streams through.

Stokes I is formed from the parallel hands, XX/YY or RR/LL:
``I = (a + b) / 2``.  Its weight is the inverse variance of that mean,
``4 / (1/w_a + 1/w_b)``, and it is flagged when either hand is flagged, the
row is flagged (FLAG_ROW), either weight is not positive, the sample is not
finite, or the row is an autocorrelation.  A row whose uvw is not finite
is data too: its samples are left out and counted apart (``n_bad_uvw_rows``)
and its uvw read as zeros, so that nothing downstream meets a NaN.

Above 400 lines on purpose: one reader of one file format (metadata tables,
selections, chunked columns, Stokes I), which splits into no independent
pieces.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator, Sequence

import numpy as np

#: Measurement Set CORR_TYPE codes (casacore Stokes enumeration).
CORR_NAMES = {1: "I", 2: "Q", 3: "U", 4: "V", 5: "RR", 6: "RL", 7: "LR", 8: "LL",
              9: "XX", 10: "XY", 11: "YX", 12: "YY"}
_PARALLEL_HANDS = (("XX", "YY"), ("RR", "LL"))

#: Rows per chunk when none is given: 10k rows of 64 channels x 4 correlations
#: are about 20 MB of complex64 data.
DEFAULT_CHUNK_ROWS = 10_000

#: Column name under which the reader returns the weights it chose
#: (WEIGHT_SPECTRUM, WEIGHT or ones): not a column of the table.
_WEIGHTS = "<weights>"


class MSError(ValueError):
    """A Measurement Set problem worth one clear line to the user."""


@dataclasses.dataclass(frozen=True)
class SpectralWindow:
    """One spectral window and the data description rows that use it."""

    index: int
    freq_hz: np.ndarray
    data_desc_ids: tuple[int, ...]
    corr_names: tuple[str, ...]


@dataclasses.dataclass
class VisChunk:
    """Stokes I data of a block of rows of one spectral window.

    Attributes
    ----------
    uvw_m
        (nrow, 3) float64 baseline coordinates in metres.
    freq_hz
        (nchan,) float64 selected channel frequencies.
    vis
        (nrow, nchan) complex64 Stokes I.
    weight
        (nrow, nchan) float32 Stokes I weights, 0 where flagged.
    mask
        (nrow, nchan) uint8, 1 where the sample is usable.
    spw
        Spectral window index.
    n_bad_uvw_rows
        Rows whose uvw was not finite (their uvw is zero here, their
        samples unusable).
    """

    uvw_m: np.ndarray
    freq_hz: np.ndarray
    vis: np.ndarray
    weight: np.ndarray
    mask: np.ndarray
    spw: int
    n_bad_uvw_rows: int = 0

    @property
    def n_usable(self) -> int:
        return int(np.count_nonzero(self.mask))


@dataclasses.dataclass
class HandsBlock:
    """The two parallel hands (XX, YY or RR, LL) of a block of rows.

    Attributes
    ----------
    uvw_m, freq_hz
        As in :class:`VisChunk`.
    time_s
        (nrow,) TIME column (MJD seconds).
    antenna1, antenna2
        (nrow,) antenna indices.
    data
        (nrow, nchan, 2) complex visibilities of the two hands.
    weight
        (nrow, nchan, 2) float64 weights, 0 where not usable.
    usable
        (nrow, nchan, 2) bool: not flagged, positive weight, finite, cross-correlation,
        finite uvw.
    n_bad_uvw_rows
        Rows whose uvw was not finite (read as zeros, unusable).
    """

    uvw_m: np.ndarray
    freq_hz: np.ndarray
    time_s: np.ndarray
    antenna1: np.ndarray
    antenna2: np.ndarray
    data: np.ndarray
    weight: np.ndarray
    usable: np.ndarray
    n_bad_uvw_rows: int = 0

    @classmethod
    def empty(cls, freq_hz: np.ndarray) -> "HandsBlock":
        nchan = freq_hz.size
        return cls(np.zeros((0, 3)), freq_hz.copy(), np.zeros(0), np.zeros(0, np.int64),
                   np.zeros(0, np.int64), np.zeros((0, nchan, 2), np.complex64),
                   np.zeros((0, nchan, 2)), np.zeros((0, nchan, 2), bool))

    def stokes_i(self, spw: int) -> VisChunk:
        """Stokes I = (a + b) / 2 with weight 4 / (1/w_a + 1/w_b); unusable
        when either hand is."""
        usable = self.usable[..., 0] & self.usable[..., 1]
        vis = 0.5 * (self.data[..., 0] + self.data[..., 1])
        safe = np.where(usable[..., None], self.weight, 1.0)
        w_i = np.where(usable, 4.0 / (1.0 / safe[..., 0] + 1.0 / safe[..., 1]), 0.0)
        return VisChunk(uvw_m=self.uvw_m, freq_hz=self.freq_hz,
                        vis=np.ascontiguousarray(np.where(usable, vis, 0), np.complex64),
                        weight=np.ascontiguousarray(w_i, np.float32),
                        mask=np.ascontiguousarray(usable, np.uint8), spw=spw,
                        n_bad_uvw_rows=self.n_bad_uvw_rows)


def _require_casacore():
    try:
        from casacore import tables
    except ImportError as error:  # pragma: no cover - depends on the install
        raise MSError("reading Measurement Sets needs python-casacore: "
                      "pip install 'clgrid[ms]'") from error
    return tables


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def parse_channels(spec: "str | slice | Sequence[int] | None", nchan: int) -> np.ndarray:
    """Channel indices selected by ``spec``.

    ``None`` or ``''`` selects all; ``"start:stop[:step]"`` a Python-style
    range; ``"3"`` one channel; ``"0,4,7"`` a list; a ``slice`` or a sequence
    of ints as in Python.  Raises :class:`MSError` for an empty or
    out-of-range selection.
    """
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        selected = np.arange(nchan)
    elif isinstance(spec, slice):
        selected = np.arange(nchan)[spec]
    elif isinstance(spec, str):
        text = spec.strip()
        try:
            if ":" in text:
                parts = [int(p) if p.strip() else None for p in text.split(":")]
                if len(parts) > 3:
                    raise ValueError
                selected = np.arange(nchan)[slice(*parts)]
            else:
                selected = np.array([int(p) for p in text.split(",")], dtype=np.int64)
        except ValueError:
            raise MSError(f"cannot read channel selection {spec!r}; "
                          f"use start:stop[:step] or a comma list") from None
    else:
        selected = np.asarray(list(spec), dtype=np.int64)
    if selected.size == 0:
        raise MSError(f"channel selection {spec!r} selects no channel of {nchan}")
    if selected.min() < 0 or selected.max() >= nchan:
        raise MSError(f"channel selection {spec!r} is outside 0..{nchan - 1}")
    return selected


class MeasurementSet:
    """A Measurement Set opened read-only for streaming Stokes I.

    Parameters
    ----------
    path
        The ``.ms`` folder.
    column
        Data column: ``'auto'`` (default: CORRECTED_DATA where present and
        filled, else DATA), ``DATA``, ``CORRECTED_DATA``, ``MODEL_DATA``...
    field
        FIELD_ID to read; its PHASE_DIR is the phase centre.
    weight_column
        ``'auto'`` (WEIGHT_SPECTRUM where present and filled, else WEIGHT),
        ``'WEIGHT_SPECTRUM'``, ``'WEIGHT'`` or ``'none'`` (all ones).
    """

    def __init__(self, path: "str | os.PathLike", column: "str | None" = "auto", field: int = 0,
                 weight_column: str = "auto"):
        tables = _require_casacore()
        self.path = os.fspath(path)
        if not os.path.isdir(self.path) or not os.path.exists(os.path.join(self.path, "table.dat")):
            raise MSError(f"{self.path}: no such Measurement Set")
        try:
            self._table = tables.table(self.path, ack=False, readonly=True)
        except RuntimeError as error:
            raise MSError(f"{self.path}: not a readable Measurement Set "
                          f"({_first_line(error)})") from None
        try:
            self.column = self._choose_data_column(column)
            self.field = int(field)
            self.phase_centre_rad, self.field_name = self._read_field(tables)
            self.spectral_windows = self._read_spectral_windows(tables)
            self.weight_column = self._choose_weight_column(weight_column)
            self.telescope, self.time_range_s = self._read_observation(tables)
        except (RuntimeError, KeyError, IndexError) as error:
            self._table.close()
            raise MSError(f"{self.path}: damaged Measurement Set ({_first_line(error)})") from None
        except MSError:
            self._table.close()
            raise

    # -- metadata -------------------------------------------------------------

    def _subtable(self, tables, name: str):
        return tables.table(self._table.getkeyword(name), ack=False, readonly=True)

    def _read_field(self, tables) -> tuple[tuple[float, float], str]:
        fields = self._subtable(tables, "FIELD")
        if not 0 <= self.field < fields.nrows():
            raise MSError(f"{self.path}: no field {self.field} (it has {fields.nrows()})")
        direction = fields.getcell("PHASE_DIR", self.field)[0]
        return (float(direction[0]), float(direction[1])), str(fields.getcell("NAME", self.field))

    def _read_spectral_windows(self, tables) -> dict[int, SpectralWindow]:
        data_desc = self._subtable(tables, "DATA_DESCRIPTION")
        spws = self._subtable(tables, "SPECTRAL_WINDOW")
        polarizations = self._subtable(tables, "POLARIZATION")
        spw_of = data_desc.getcol("SPECTRAL_WINDOW_ID")
        pol_of = data_desc.getcol("POLARIZATION_ID")
        windows: dict[int, SpectralWindow] = {}
        for ddid, (spw, pol) in enumerate(zip(spw_of, pol_of)):
            corr = tuple(CORR_NAMES.get(int(c), str(c))
                         for c in polarizations.getcell("CORR_TYPE", int(pol)))
            if spw in windows:
                if windows[spw].corr_names != corr:
                    raise MSError(f"spectral window {spw} has two polarisation setups")
                windows[spw] = dataclasses.replace(
                    windows[spw], data_desc_ids=windows[spw].data_desc_ids + (ddid,))
            else:
                windows[int(spw)] = SpectralWindow(
                    int(spw), np.asarray(spws.getcell("CHAN_FREQ", int(spw)), np.float64),
                    (ddid,), corr)
        return windows

    def _read_observation(self, tables) -> tuple[str, tuple[float, float]]:
        try:
            observation = self._subtable(tables, "OBSERVATION")
            return (str(observation.getcell("TELESCOPE_NAME", 0)),
                    tuple(float(t) for t in observation.getcell("TIME_RANGE", 0)))
        except (RuntimeError, KeyError, IndexError):
            return "", (0.0, 0.0)

    def _choose_data_column(self, choice: "str | None") -> str:
        """``choice`` checked, or for ``None``/``'auto'`` CORRECTED_DATA when
        present and filled, else DATA."""
        names = self._table.colnames()
        if choice is None or choice.upper() == "AUTO":
            if ("CORRECTED_DATA" in names and self._table.nrows()
                    and self._table.iscelldefined("CORRECTED_DATA", 0)):
                return "CORRECTED_DATA"
            choice = "DATA"
        column = choice.upper()
        if column not in names:
            data_columns = [c for c in names if c.endswith("DATA")]
            raise MSError(f"{self.path}: no column {column!r} "
                          f"(data columns: {', '.join(data_columns) or 'none'})")
        return column

    def _choose_weight_column(self, choice: str) -> str:
        choice = choice.upper()
        if choice == "NONE":
            return "NONE"
        if choice == "AUTO":
            if ("WEIGHT_SPECTRUM" in self._table.colnames() and self._table.nrows()
                    and self._table.iscelldefined("WEIGHT_SPECTRUM", 0)):
                return "WEIGHT_SPECTRUM"
            return "WEIGHT"
        if choice not in self._table.colnames():
            raise MSError(f"{self.path}: no weight column {choice!r}")
        return choice

    def getcol(self, column: str, start: int = 0, count: int = -1) -> np.ndarray:
        """``count`` rows of ``column`` from row ``start`` (all by default);
        a damaged table raises :class:`MSError` naming what failed."""
        try:
            return self._table.getcol(column, start, count)
        except RuntimeError as error:
            raise MSError(f"{self.path}: cannot read column {column} "
                          f"({_first_line(error)})") from None

    def longest_baseline_m(self) -> float:
        """Largest distance between two antennas of the ANTENNA table (m)."""
        tables = _require_casacore()
        try:
            positions = self._subtable(tables, "ANTENNA").getcol("POSITION")
        except RuntimeError as error:
            raise MSError(f"{self.path}: cannot read ANTENNA positions "
                          f"({_first_line(error)})") from None
        if len(positions) < 2:
            return 0.0
        return float(np.max(np.linalg.norm(positions[:, None] - positions[None], axis=2)))

    @property
    def nrows(self) -> int:
        return int(self._table.nrows())

    def select_spws(self, spw: "int | Sequence[int] | str | None" = None) -> list[int]:
        """Spectral window indices selected by ``spw`` (``None``: all)."""
        if spw is None or (isinstance(spw, str) and not spw.strip()):
            return sorted(self.spectral_windows)
        if isinstance(spw, str):
            try:
                chosen = [int(p) for p in spw.split(",")]
            except ValueError:
                raise MSError(f"cannot read spectral window selection {spw!r}") from None
        elif isinstance(spw, (int, np.integer)):
            chosen = [int(spw)]
        else:
            chosen = [int(s) for s in spw]
        missing = [s for s in chosen if s not in self.spectral_windows]
        if missing:
            raise MSError(f"no spectral window {missing} (present: {sorted(self.spectral_windows)})")
        return chosen

    def parallel_hands(self, spw: int) -> tuple[int, int]:
        """Correlation positions of XX/YY or RR/LL in spectral window ``spw``."""
        names = self.spectral_windows[spw].corr_names
        for first, second in _PARALLEL_HANDS:
            if first in names and second in names:
                return names.index(first), names.index(second)
        raise MSError(f"spectral window {spw} has correlations {names}: "
                      f"Stokes I needs XX and YY or RR and LL")

    # -- data -----------------------------------------------------------------

    def _rows_of(self, spw: int) -> np.ndarray:
        ddids = set(self.spectral_windows[spw].data_desc_ids)
        desc = self.getcol("DATA_DESC_ID")
        field = self.getcol("FIELD_ID")
        return np.flatnonzero(np.isin(desc, list(ddids)) & (field == self.field))

    def count_rows(self, spw=None) -> int:
        """Rows that :meth:`chunks` would read for this selection."""
        return int(sum(self._rows_of(s).size for s in self.select_spws(spw)))

    def chunks(self, spw=None, channels=None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
               calibration=None) -> Iterator[VisChunk]:
        """Yield Stokes I :class:`VisChunk` objects, one block of rows at a time.

        Parameters
        ----------
        spw
            Spectral window(s) to read; default all.
        channels
            Channel selection, see :func:`parse_channels`; the same in every
            window.
        chunk_rows
            Rows per chunk; rows of one chunk are contiguous runs of the
            table read with one ``getcol`` per run.
        calibration
            Gains to divide out of each hand before forming Stokes I: an
            object with ``apply(block: HandsBlock, spw) -> HandsBlock``
            (:class:`clgrid.pipeline.calibrate.PointCalibration`).
        """
        if chunk_rows < 1:
            raise ValueError("chunk_rows must be >= 1")
        for window in self.select_spws(spw):
            selected = parse_channels(channels, self.spectral_windows[window].freq_hz.size)
            rows = self._rows_of(window)
            for start in range(0, rows.size, chunk_rows):
                yield self._read_rows(window, rows[start:start + chunk_rows], selected,
                                      calibration)

    def _read_columns(self, rows: np.ndarray, columns: Sequence[str]) -> dict[str, np.ndarray]:
        """``columns`` of ``rows`` (sorted, non-empty), by column name."""
        parts: dict[str, list] = {name: [] for name in columns}
        # Contiguous runs of rows: one getcol call each (rows of one window
        # are usually long runs; a row-by-row read would be very slow).
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        for run in np.split(rows, breaks):
            start, count = int(run[0]), int(run.size)
            for name in columns:
                parts[name].append(self._read_weights(start, count) if name == _WEIGHTS
                                   else self.getcol(name, start, count))
        return {name: np.concatenate(values) for name, values in parts.items()}

    def _read_block(self, spw: int, rows: np.ndarray, channels: np.ndarray) -> HandsBlock:
        """The two parallel hands of ``rows``, with their weights and usability."""
        hands = list(self.parallel_hands(spw))
        if not rows.size:
            return HandsBlock.empty(self.spectral_windows[spw].freq_hz[channels])
        block = self._read_columns(rows, ("UVW", self.column, "FLAG", "FLAG_ROW", "ANTENNA1",
                                          "ANTENNA2", "TIME", _WEIGHTS))
        data = block[self.column][:, channels][..., hands]
        flag = block["FLAG"][:, channels][..., hands]
        weight = block[_WEIGHTS]
        weight = weight[:, channels] if weight.ndim == 3 else weight[:, None, :]
        weight = np.broadcast_to(weight[..., hands], data.shape).astype(np.float64)
        uvw = np.ascontiguousarray(block["UVW"], np.float64)
        bad_uvw = ~np.all(np.isfinite(uvw), axis=1)
        uvw[bad_uvw] = 0.0  # unusable now; zeros keep NaN and Inf out of every sum
        usable = (~flag & (weight > 0) & np.isfinite(data)
                  & ~(block["FLAG_ROW"] | bad_uvw)[:, None, None]
                  & (block["ANTENNA1"] != block["ANTENNA2"])[:, None, None])
        return HandsBlock(uvw_m=uvw, freq_hz=self.spectral_windows[spw].freq_hz[channels].copy(),
                          time_s=block["TIME"].astype(np.float64),
                          antenna1=block["ANTENNA1"].astype(np.int64),
                          antenna2=block["ANTENNA2"].astype(np.int64),
                          data=data, weight=np.where(usable, weight, 0.0), usable=usable,
                          n_bad_uvw_rows=int(np.count_nonzero(bad_uvw)))

    def usable_uv_m(self, spw=None, chunk_rows: int = DEFAULT_CHUNK_ROWS * 10
                    ) -> Iterator[np.ndarray]:
        """``max(|u|, |v|)`` in metres of the selected rows that can hold a
        usable sample, one array per block of rows.

        Left out: rows with FLAG_ROW, rows flagged in every channel and
        correlation, autocorrelations and rows whose uvw is not finite (what
        :meth:`chunks` never grids, so it cannot set the pixel size).
        """
        for window in self.select_spws(spw):
            rows = self._rows_of(window)
            for start in range(0, rows.size, chunk_rows):
                block = self._read_columns(rows[start:start + chunk_rows],
                                           ("UVW", "FLAG_ROW", "FLAG", "ANTENNA1", "ANTENNA2"))
                uvw = block["UVW"]
                usable = (~block["FLAG_ROW"] & ~np.all(block["FLAG"], axis=(1, 2))
                          & (block["ANTENNA1"] != block["ANTENNA2"])
                          & np.all(np.isfinite(uvw), axis=1))
                yield np.max(np.abs(uvw[usable, :2]), axis=1, initial=0.0)

    def read_hands(self, spw: int, channels=None) -> HandsBlock:
        """Every selected row of spectral window ``spw`` at once (for calibration)."""
        selected = parse_channels(channels, self.spectral_windows[spw].freq_hz.size)
        return self._read_block(spw, self._rows_of(spw), selected)

    def _read_rows(self, spw: int, rows: np.ndarray, channels: np.ndarray,
                   calibration=None) -> VisChunk:
        block = self._read_block(spw, rows, channels)
        if calibration is not None:
            block = calibration.apply(block, spw)
        return block.stokes_i(spw)

    def _read_weights(self, start: int, count: int) -> np.ndarray:
        if self.weight_column == "NONE":
            data_shape = self._table.getcell(self.column, start).shape
            return np.ones((count,) + data_shape, np.float32)
        return self.getcol(self.weight_column, start, count)

    def close(self) -> None:
        self._table.close()

    def __enter__(self) -> "MeasurementSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["CORR_NAMES", "DEFAULT_CHUNK_ROWS", "HandsBlock", "MSError", "MeasurementSet",
           "SpectralWindow", "VisChunk", "parse_channels"]
