"""Table-batched lookups over quantized tables, for inference: ``QuantizedTableBatchedEmbeddingBag``.

Each table has its own format (``quantized.FORMATS``) and width; the tables' rows live in one
``uint8`` buffer, table after table. Inputs as FBGEMM's TBE: ``indices`` (each relative to its
table, int32 or int64), ``offsets`` (T * B + 1, table-major bags), optional float32
``per_sample_weights``. Pooling "sum" / "mean" gives ``[B, sum(dims)]`` (table t's columns after
those of the tables before it), "none" the unpooled rows ``[len(indices), dim]`` (every table of one
width; offsets from 0 to len(indices)). Output float32, float16 or int8 (``rint(x * inverse_scale)``
saturated, one inverse scale per table).

On CUDA one launch per format (quantized_forward.cu; a module of one format is one launch) and no
host synchronisation: the launch geometry comes from the shapes alone and is cached per batch size.
On the CPU the float64 reference (``quantized.reference_forward``) rounded once to the output dtype.

Index check: none by default on CUDA (as FBGEMM's ``BoundsCheckMode.NONE``; the caller guarantees the
range and ``offsets[0] == 0``); ``check_indices`` (attribute or constructor argument, the modes of
docs/kernels.md, "Index range check") runs the table-batched check pass first, which reports
out-of-range indices and bad offsets, a first offset that is not 0 included. The CPU path always
refuses a first offset that is not 0, as torch's CPU kernel does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from . import nvrtc, quantized
from .errors import CheckMode
from .index_check import FixedCheckMode
from .quantized import FORMAT_CODE, POOLINGS, QuantizedTable, quantize, reference_forward, round_output, row_bytes

SOURCE = "quantized_forward.cu"
KERNEL = "quantized_tbe_forward"
BLOCK = 256
OUTPUT_CODE = {torch.float32: 0, torch.float16: 1, torch.int8: 2}
POOLING_CODE = {"sum": 0, "mean": 1, "none": 2}
META_WORDS = 8
# Per format: rows a team loads at once, blocks per SM the registers are capped for (the int4
# kernel holds 32 accumulators a lane), whether a team loads its next rows before it sums the
# current ones (PIPELINE), and the bytes a lane holds of a row (LANE_BYTES: 16, a 16-byte chunk of
# the row; 4, a 4-byte word of its codes, for the byte-coded formats of WORD_FORMATS: 4 or 8
# accumulators a lane instead of 16 or 32, so fewer registers and more warps). Benchmarks change
# them (quantized_suite --sweep, --compare).
# int8 / int4: the sweep's picks on an H200 (docs/perf/issue54-quantized.md); the fp8 and table-wise
# int8 kernels hold as many accumulators as int8's and take its shape.
LAUNCH_SHAPE: dict[str, tuple[int, int, int, int]] = {
    "fp32": (4, 4, 0, 16), "fp16": (4, 4, 0, 16), "int8": (2, 3, 1, 16), "int4": (4, 5, 0, 4),
    "fp8_rowwise": (2, 3, 1, 16), "fp8_tablewise": (2, 3, 1, 16), "int8_tablewise": (2, 3, 1, 16)}
WORD_FORMATS = frozenset({"int8", "int4", "fp8_rowwise", "fp8_tablewise", "int8_tablewise"})
"""The formats whose kernel has the 4-byte-lane layout (one byte or half a byte an element)."""
_SIGNATURE = nvrtc.params(nvrtc.PTR + nvrtc.PTR + nvrtc.I32 + nvrtc.I64 + nvrtc.PTR + nvrtc.PTR + nvrtc.PTR
                          + nvrtc.PTR + nvrtc.I64)
POISON_OUTPUTS = False
"""Tests set it: every output starts as NaN (int8: 0x7F), so an element left unwritten fails."""


@dataclass(frozen=True)
class TableGeometry:
    """How one table's bags map onto warps: ``tw`` lanes a row (each holding ``lane_bytes`` of it:
    ``chunks`` such units a row), ``tpb`` teams a bag, ``bpw`` bags a warp."""

    chunks: int
    tw: int
    tpb: int
    bpw: int
    lane_bytes: int = 16


def lane_bytes(fmt: str) -> int:
    """The bytes a lane holds of a row in ``fmt``'s launch (LAUNCH_SHAPE; 16 for the float formats)."""
    return LAUNCH_SHAPE[fmt][3] if fmt in WORD_FORMATS else 16


def row_units(fmt: str, dim: int, unit: int) -> int:
    """A row's units: 16-byte chunks of the whole row (qparams and padding included), or 4-byte words
    of its codes (the qparams are read apart)."""
    if unit == 16:
        return row_bytes(fmt, dim) // 16
    return -(-quantized.data_bytes(fmt, dim) // 4)


FILL_WARPS = 8192
"""Below this many warps with one team a bag (about 2.5 waves of 24 warps on 132 SMs), a bag's rows
are split over several teams so that the launch still fills the GPU."""
GEOMETRY_POLICY = "fill"
""""fill": one team a bag unless the launch would not fill the GPU; "mean": a bag gets as many
teams as give each ``rows_in_flight`` of the mean bag's rows (the first version; benchmarks compare)."""


LONG_BAG_BATCHES = 16
"""With ``pooling_factors``, a table whose bags hold more than this many batches of rows for one team
splits each bag over several teams (else one team's walk of a 100-row bag is the launch's tail); the
teams a bag gets divide the warp's teams, so none idles."""


def geometry(fmt: str, dim: int, mean_bag: float, rows_in_flight: int, bags: int = 0,
             known_length: bool = False, unit: int = 16) -> TableGeometry:
    """A team covers a row (at most 32 lanes; wider rows in tiles) and a warp holds ``32 // tw``
    teams. One team a bag (a warp takes as many bags as it has teams: short bags keep every team
    busy) unless ``bags`` such warps would not fill the GPU, or (``known_length``: ``mean_bag`` is
    this table's own) the table's bags are long: then a bag gets up to a warp's teams, as many as
    give each at least ``rows_in_flight`` of the bag's rows. ``unit``: the bytes a lane holds
    (``lane_bytes``)."""
    chunks = row_units(fmt, dim, unit)
    tw = min(chunks, 32)
    teams = 32 // tw
    by_length = max(1, min(teams, int(mean_bag // rows_in_flight)))
    if GEOMETRY_POLICY == "mean":
        tpb = by_length
    elif known_length and mean_bag > LONG_BAG_BATCHES * rows_in_flight:
        wanted = -(-int(mean_bag) // (LONG_BAG_BATCHES * rows_in_flight))
        tpb = min(d for d in range(1, teams + 1) if teams % d == 0 and (d >= wanted or d == teams))
    else:
        tpb = 1 if bags // teams >= FILL_WARPS else min(by_length, max(1, -(-FILL_WARPS * teams // max(bags, 1))))
    return TableGeometry(chunks, tw, tpb, teams // tpb, unit)


def _float_bits(x: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


class QuantizedTableBatchedEmbeddingBag(FixedCheckMode, torch.nn.Module):
    """Many quantized tables, one lookup (see the module docstring). ``tables``: QuantizedTable
    values (``quantized.quantize`` / ``from_fbgemm``); ``output_inverse_scales``: one per table,
    needed for int8 output; ``pooling_factors``: optional, each table's expected bag length (a
    hint for the launch geometry: long bags are split over several teams; results do not depend
    on it). ``check_indices``: the index check's mode on CUDA (module docstring), resolved here,
    once: False (no check, the default), or a mode of docs/kernels.md, "Index range check" (None:
    the environment's)."""

    data: Tensor

    def __init__(self, tables: Sequence[QuantizedTable], pooling: str = "sum",
                 output_dtype: torch.dtype = torch.float16, output_inverse_scales: Sequence[float] | None = None,
                 device: torch.device | str | None = None, pooling_factors: Sequence[float] | None = None,
                 check_indices: CheckMode | str | bool | None = False) -> None:
        super().__init__()
        self.check_indices = check_indices
        self._table_sizes: Tensor | None = None
        if not tables:
            raise ValueError("QuantizedTableBatchedEmbeddingBag needs at least one table")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if output_dtype not in OUTPUT_CODE:
            raise ValueError(f"output dtype must be float32, float16 or int8, got {output_dtype}")
        if output_dtype == torch.int8:
            if pooling == "none":
                raise ValueError("int8 output is for pooled lookups")
            if output_inverse_scales is None or len(output_inverse_scales) != len(tables):
                raise ValueError("int8 output needs one inverse scale per table (output_inverse_scales)")
        if pooling_factors is not None and len(pooling_factors) != len(tables):
            raise ValueError("pooling_factors: one mean bag length per table")
        self.pooling_factors = None if pooling_factors is None else [float(x) for x in pooling_factors]
        if pooling == "none" and len({t.dim for t in tables}) > 1:
            raise ValueError("unpooled lookups need tables of one width")
        self.formats = [t.format for t in tables]
        self.dims = [t.dim for t in tables]
        self.rows = [t.rows for t in tables]
        self.scales = [float(t.scale) if t.scale is not None else 1.0 for t in tables]
        self.pooling, self.output_dtype = pooling, output_dtype
        given = output_inverse_scales
        self.inverse_scales = [float(s) for s in given] if given else [1.0] * len(tables)
        self.row_bytes = [row_bytes(t.format, t.dim) for t in tables]
        self.byte_base = [0]
        for rows, stride in zip(self.rows, self.row_bytes, strict=True):
            self.byte_base.append(self.byte_base[-1] + rows * stride)
        target = torch.device(device) if device is not None else tables[0].data.device
        self.register_buffer("data", torch.cat([t.data.reshape(-1).to(target) for t in tables]))
        self._meta: dict[tuple[object, ...], list[tuple[str, Tensor, int]]] = {}

    @classmethod
    def from_float(cls, weights: Sequence[Tensor], formats: str | Sequence[str], pooling: str = "sum",
                   output_dtype: torch.dtype = torch.float16, **kwargs: object) -> QuantizedTableBatchedEmbeddingBag:
        """Quantize float tables (``quantized.quantize``; one format for all, or one per table)."""
        fmts = [formats] * len(weights) if isinstance(formats, str) else list(formats)
        return cls([quantize(w, f) for w, f in zip(weights, fmts, strict=True)], pooling, output_dtype,
                   **kwargs)  # type: ignore[arg-type]

    def tables(self) -> list[QuantizedTable]:
        """The tables, their data views of the module's buffer."""
        return [QuantizedTable(f, d, self.data[b:b + r * s].view(r, s), None if f not in ("fp8_tablewise",
                                                                                           "int8_tablewise") else sc)
                for f, d, r, s, b, sc in zip(self.formats, self.dims, self.rows, self.row_bytes, self.byte_base,
                                             self.scales, strict=False)]

    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Tensor | None = None) -> Tensor:
        count = len(self.formats)
        if indices.dim() != 1 or offsets.dim() != 1:
            raise ValueError("indices and offsets must be 1-D")
        if (offsets.numel() - 1) % count or offsets.numel() < 1:
            raise ValueError(f"offsets must hold T * B + 1 entries (T = {count}), got {offsets.numel()}")
        if indices.dtype not in (torch.int32, torch.int64) or offsets.dtype not in (torch.int32, torch.int64):
            raise TypeError("indices and offsets must be int32 or int64")
        if per_sample_weights is not None and per_sample_weights.shape != indices.shape:
            raise ValueError("per_sample_weights must have the shape of indices")
        if indices.numel() >= 2**31:
            raise ValueError("at most 2^31 - 1 indices a call")
        batch = (offsets.numel() - 1) // count
        if self.data.device.type != "cuda":
            if int(offsets[0]) != 0:  # CPU tensors: reading it costs no synchronisation
                raise ValueError(f"offsets[0] must be 0 (the first bag starts at the first index), got "
                                 f"{int(offsets[0])}, as torch.nn.functional.embedding_bag requires")
            return self._cpu_forward(indices, offsets, per_sample_weights)
        if indices.device != self.data.device or offsets.device != self.data.device:
            raise RuntimeError("indices and offsets must be on the tables' device")
        if offsets.dtype != indices.dtype:
            offsets = offsets.to(indices.dtype)
        indices, offsets = indices.contiguous(), offsets.contiguous()
        if self._check_mode is not CheckMode.IGNORE:
            indices, offsets = self._checked(indices, offsets)
        psw = None if per_sample_weights is None else per_sample_weights.float().contiguous()
        if self.pooling == "none":
            shape: tuple[int, int] = (indices.numel(), self.dims[0])
        else:
            shape = (batch, sum(self.dims))
        out = torch.empty(shape, dtype=self.output_dtype, device=self.data.device)
        if POISON_OUTPUTS:
            out.view(torch.uint8).fill_(0x7F if self.output_dtype == torch.int8 else 0xFF)
        stream = torch.cuda.current_stream(self.data.device).cuda_stream
        device_index = self.data.device.index if self.data.device.index is not None else torch.cuda.current_device()
        for fmt, meta, warps in self._launches(batch, indices.numel(), device_index):
            rows_in_flight, min_blocks, pipeline, _ = LAUNCH_SHAPE[fmt]
            defines = {"TABLE_FORMAT": FORMAT_CODE[fmt], "POOLING": POOLING_CODE[self.pooling],
                       "OUT_DTYPE": OUTPUT_CODE[self.output_dtype], "PSW": int(psw is not None),
                       "INDEX64": int(indices.dtype == torch.int64), "ROWS_IN_FLIGHT": rows_in_flight,
                       "MIN_BLOCKS": min_blocks, "PIPELINE": pipeline, "LANE_BYTES": lane_bytes(fmt)}
            fn = nvrtc.get_function(SOURCE, KERNEL, defines, device_index)
            grid = -(-warps * 32 // BLOCK)
            nvrtc.launch_packed(fn, grid, BLOCK, stream, _SIGNATURE,
                                (self.data.data_ptr(), meta.data_ptr(), meta.shape[0] - 1, batch, indices.data_ptr(),
                                 offsets.data_ptr(), 0 if psw is None else psw.data_ptr(), out.data_ptr(),
                                 out.shape[1]))
        return out

    def _checked(self, indices: Tensor, offsets: Tensor) -> tuple[Tensor, Tensor]:
        """The table-batched index check pass (tbe.check_tables) in the module's mode: the copies the
        lookup reads; errors as every entry point reports them (EmbeddingIndexError, deferred or not)."""
        from .api import surface_errors
        from .tbe import check_tables

        mode = self._check_mode
        surface_errors(self.data)  # an earlier deferred check's error, as every checking entry point
        if self._table_sizes is None or self._table_sizes.device != self.data.device:
            self._table_sizes = torch.tensor(self.rows, dtype=torch.int64, device=self.data.device)
        return check_tables(indices, offsets, self._table_sizes, max(self.rows), mode)

    def _launches(self, batch: int, num_indices: int, device_index: int) -> list[tuple[str, Tensor, int]]:
        """Per format: its tables' metadata (quantized_forward.cu's layout) and its warp count;
        made once per (batch, geometry) and kept on the device."""
        mean_bag = num_indices / max(1, batch * len(self.formats))
        bags = batch * len(self.formats)
        lengths = self.pooling_factors or [mean_bag] * len(self.formats)
        geoms = [geometry(f, d, n, LAUNCH_SHAPE[f][0], bags, self.pooling_factors is not None, lane_bytes(f))
                 for f, d, n in zip(self.formats, self.dims, lengths, strict=True)]
        key = (batch, device_index, tuple(geoms), tuple(LAUNCH_SHAPE.items()))
        found = self._meta.get(key)
        if found is not None:
            return found
        cols = [0]
        for d in self.dims:
            cols.append(cols[-1] + d)
        launches = []
        for fmt in dict.fromkeys(self.formats):
            words: list[list[int]] = []
            warp = 0
            for t, g in enumerate(geoms):
                if self.formats[t] != fmt or batch == 0:
                    continue
                scales = _float_bits(self.scales[t]) | (_float_bits(self.inverse_scales[t]) << 32)
                packed = (g.tw << 8) | (g.tpb << 16) | (g.bpw << 24) | (t << 32)
                words.append([warp, self.byte_base[t], self.row_bytes[t], self.dims[t], packed,
                              cols[t] if self.pooling != "none" else 0, scales - (1 << 64 if scales >= 1 << 63 else 0),
                              g.chunks])
                warp += -(-batch // g.bpw)
            if not words:
                continue
            words.append([warp] + [0] * (META_WORDS - 1))
            meta = torch.tensor(words, dtype=torch.int64).to(f"cuda:{device_index}")
            launches.append((fmt, meta, warp))
        self._meta[key] = launches
        return launches

    def _cpu_forward(self, indices: Tensor, offsets: Tensor, psw: Tensor | None) -> Tensor:
        pooled = reference_forward(self.tables(), indices, offsets, self.pooling, psw)
        return round_output(pooled, self.output_dtype, self.inverse_scales, self.dims)
