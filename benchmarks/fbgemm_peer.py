"""FBGEMM's table-batched embedding (TBE) forward as a peer in the benchmark.

``python3 -m benchmarks fbgemm_peer [--fbgemm DIR]`` says where the op would come from (exit 0),
or why it cannot be used (exit 2).

Where the op comes from (``locate``), in this order:

1. the ``fbgemm_gpu`` package, when it imports (it registers ``torch.ops.fbgemm.*``);
2. a directory (``--fbgemm DIR`` or the environment variable ``FBGEMM_FORWARD_DIR``) holding
   FBGEMM's forward library: either the files that ``../shared/tools/fbgemm-forward.sh`` packs
   (``fwd.xz`` and ``deps.tar.xz``, unpacked here into a temporary directory) or the unpacked
   ``.so`` files themselves.

No library, no peer: every "vs FBGEMM" figure is then ``None`` and the reason is recorded.
The op is FBGEMM's ``split_embedding_codegen_forward_{unweighted,weighted}_cuda`` with every
table resident in GPU memory; its arguments are built by ``forward_arguments`` (pure, tested
on the CPU). It covers sum and mean pooling, float32 and float16 weights (this build has no
bfloat16 weights), per-sample weights (float32) with sum; it has no max pooling.
"""

from __future__ import annotations

import atexit
import ctypes
import lzma
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ENV_DIR = "FBGEMM_FORWARD_DIR"
FORWARD_LIBRARY = "fbgemm_gpu_tbe_training_forward.so"
# Each needs the ones before it (loaded with RTLD_GLOBAL so the next one resolves its symbols).
DEPENDENCIES = ("asmjit.so", "fbgemm_gpu_config.so", "fbgemm.so", "fbgemm_gpu_tbe_common.so")
PACKED = ("fwd.xz", "deps.tar.xz")
POOLING = {"sum": 0, "mean": 1}  # FBGEMM's PoolingMode
OUTPUT_DTYPE = {torch.float32: 0, torch.float16: 1}  # FBGEMM's SparseType


class PeerError(RuntimeError):
    """FBGEMM's library was named but cannot be used (missing file, failed load)."""


@dataclass(frozen=True)
class PeerSource:
    """Where FBGEMM's forward op was found, or why it was not."""

    available: bool
    """True when ``torch.ops.fbgemm.split_embedding_codegen_forward_unweighted_cuda`` is registered."""
    origin: str
    """``"fbgemm_gpu package"``, the directory it was loaded from, or ``""`` when unavailable."""
    reason: str = ""
    """Why the peer is unavailable (empty when available)."""


def _registered() -> bool:
    return hasattr(torch.ops.fbgemm, "split_embedding_codegen_forward_unweighted_cuda")


def library_files(directory: Path) -> dict[str, Path]:
    """The forward library and its dependencies in ``directory``, unpacked form: name -> path.
    Raises PeerError naming what is missing."""
    wanted = (*DEPENDENCIES, FORWARD_LIBRARY)
    missing = [name for name in wanted if not (directory / name).is_file()]
    if missing:
        raise PeerError(f"{directory}: missing {', '.join(missing)} (FBGEMM's forward library; "
                        f"see ../shared/tools/fbgemm-forward.sh)")
    return {name: directory / name for name in wanted}


def unpack(directory: Path, into: Path) -> Path:
    """``directory``'s packed library (fwd.xz, deps.tar.xz) unpacked into ``into``; returns ``into``."""
    missing = [name for name in PACKED if not (directory / name).is_file()]
    if missing:
        raise PeerError(f"{directory}: missing {', '.join(missing)} and no unpacked {FORWARD_LIBRARY}")
    try:
        with tarfile.open(directory / "deps.tar.xz") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name in DEPENDENCIES]
            tar.extractall(into, members=members, filter="data")
        with lzma.open(directory / "fwd.xz") as src, open(into / FORWARD_LIBRARY, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except (OSError, tarfile.TarError, lzma.LZMAError) as exc:
        raise PeerError(f"{directory}: cannot unpack FBGEMM's library: {exc}") from exc
    return into


def load_directory(directory: Path) -> PeerSource:
    """Load the forward library from ``directory`` (unpacked or packed)."""
    if not directory.is_dir():
        raise PeerError(f"{directory}: no such directory (FBGEMM's forward library)")
    if not (directory / FORWARD_LIBRARY).is_file():
        into = Path(tempfile.mkdtemp(prefix="fbgemm-forward-"))
        atexit.register(shutil.rmtree, into, ignore_errors=True)  # ~100 MB unpacked
        directory = unpack(directory, into)
    files = library_files(directory)
    try:
        for name in DEPENDENCIES:
            ctypes.CDLL(str(files[name]), mode=ctypes.RTLD_GLOBAL)
        torch.ops.load_library(str(files[FORWARD_LIBRARY]))
    except OSError as exc:
        raise PeerError(f"{directory}: loading FBGEMM's library failed: {exc}") from exc
    if not _registered():
        raise PeerError(f"{directory}: the library loaded but registered no TBE forward op")
    return PeerSource(True, str(directory))


def locate(directory: str | None = None) -> PeerSource:
    """Find FBGEMM's forward op: the package, else ``directory`` (or $FBGEMM_FORWARD_DIR).
    A named directory that cannot be used raises PeerError; nothing named is "unavailable"."""
    if _registered():
        return PeerSource(True, "already registered")
    try:
        import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm.*)

        if _registered():
            return PeerSource(True, "fbgemm_gpu package")
    except Exception:  # absent, or built for another torch: fall back to a directory
        pass
    named = directory or os.environ.get(ENV_DIR)
    if not named:
        return PeerSource(False, "", f"fbgemm_gpu is not installed and no directory was named ({ENV_DIR})")
    return load_directory(Path(named))


def supports(mode: str, dtype: torch.dtype, per_sample_weights: bool) -> bool:
    """Whether FBGEMM's forward op has this case (sum/mean, float32/float16, weights with sum)."""
    return mode in POOLING and dtype in OUTPUT_DTYPE and (not per_sample_weights or mode == "sum")


def forward_arguments(weight: torch.Tensor, table_rows: list[int], indices: torch.Tensor, offsets: torch.Tensor,
                      mode: str, per_sample_weights: torch.Tensor | None) -> dict[str, Any]:
    """The op's arguments for T tables stacked in ``weight`` ([sum of rows, D], table t from row
    ``table_rows[t]``), ``indices`` relative to each table and ``offsets`` of T * B + 1 bags,
    table-major (FBGEMM's layout, also ours). The output dtype is the weight's."""
    dim = weight.shape[1]
    return _arguments(weight.reshape(-1), [row * dim for row in table_rows], [dim] * len(table_rows), indices,
                      offsets, mode, per_sample_weights)


def mixed_forward_arguments(tables: list[torch.Tensor], indices: torch.Tensor, offsets: torch.Tensor, mode: str,
                            per_sample_weights: torch.Tensor | None) -> dict[str, Any]:
    """The op's arguments for tables of their own widths D_t (``tables[t]``: [rows, D_t], one
    dtype), which FBGEMM's TBE takes natively in one launch: every table's rows copied into one
    flat buffer (table t from element ``weights_offsets[t]``), ``D_offsets`` the widths' running
    sum; the output is [B, sum(D_t)] in table order, as ours."""
    flat = torch.cat([t.reshape(-1) for t in tables])
    starts = [sum(t.numel() for t in tables[:k]) for k in range(len(tables))]
    return _arguments(flat, starts, [t.shape[1] for t in tables], indices, offsets, mode, per_sample_weights)


def _arguments(flat: torch.Tensor, starts: list[int], dims: list[int], indices: torch.Tensor, offsets: torch.Tensor,
               mode: str, per_sample_weights: torch.Tensor | None) -> dict[str, Any]:
    """The op's arguments: table t of width dims[t] from element starts[t] of ``flat``."""
    if not supports(mode, flat.dtype, per_sample_weights is not None):
        raise ValueError(f"FBGEMM's forward has no {mode} pooling of {flat.dtype}"
                         f"{' with per-sample weights' if per_sample_weights is not None else ''}")
    tables, device = len(dims), flat.device
    if (offsets.numel() - 1) % tables:
        raise ValueError(f"offsets must hold T * B + 1 entries (T = {tables}), got {offsets.numel()}")
    # in the op's argument order (FbgemmForward passes the values positionally)
    args: dict[str, Any] = {
        "dev_weights": flat,
        "uvm_weights": flat.new_empty(0),
        "lxu_cache_weights": flat.new_empty((0, 0)),
        "weights_placements": torch.zeros(tables, dtype=torch.int32, device=device),  # all on the device
        "weights_offsets": torch.tensor(starts, dtype=torch.int64, device=device),
        "D_offsets": torch.tensor([sum(dims[:t]) for t in range(tables + 1)], dtype=torch.int32, device=device),
        "total_D": sum(dims),
        "max_D": max(dims),
        "indices": indices.reshape(-1).to(torch.int64),
        "offsets": offsets.to(torch.int64),
        "pooling_mode": POOLING[mode],
    }
    if per_sample_weights is not None:  # the weighted op takes them right after pooling_mode
        args["indice_weights"] = per_sample_weights.reshape(-1).to(torch.float32)
    args.update({
        "lxu_cache_locations": torch.empty(0, dtype=torch.int32, device=device),
        "uvm_cache_stats": torch.empty(0, dtype=torch.int32, device=device),
        "output_dtype": OUTPUT_DTYPE[flat.dtype],
        "is_experimental": False,
    })
    return args


def fixed_offsets(batch: int, pooling: int, device: torch.device | str) -> torch.Tensor:
    """CSR offsets (B + 1) of B bags of ``pooling`` rows each: a [B, L] input as FBGEMM takes it."""
    return torch.arange(0, batch * pooling + 1, pooling, dtype=torch.int64, device=device)


class FbgemmForward:
    """One FBGEMM TBE forward call with its arguments built once: ``peer()`` -> [B, T * D]
    (``FbgemmForward.mixed``: tables of their own widths, [B, sum(D_t)])."""

    def __init__(self, weight: torch.Tensor, table_rows: list[int], indices: torch.Tensor, offsets: torch.Tensor,
                 mode: str, per_sample_weights: torch.Tensor | None = None) -> None:
        self._bind(forward_arguments(weight, table_rows, indices, offsets, mode, per_sample_weights))

    @classmethod
    def mixed(cls, tables: list[torch.Tensor], indices: torch.Tensor, offsets: torch.Tensor, mode: str,
              per_sample_weights: torch.Tensor | None = None) -> FbgemmForward:
        peer = cls.__new__(cls)
        peer._bind(mixed_forward_arguments(tables, indices, offsets, mode, per_sample_weights))
        return peer

    def _bind(self, args: dict[str, Any]) -> None:
        self.arguments = tuple(args.values())
        ops = torch.ops.fbgemm
        self.op = (ops.split_embedding_codegen_forward_unweighted_cuda if "indice_weights" not in args
                   else ops.split_embedding_codegen_forward_weighted_cuda)

    def __call__(self) -> torch.Tensor:
        out: torch.Tensor = self.op(*self.arguments)
        return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fbgemm", help=f"FBGEMM's forward library directory (default ${ENV_DIR})")
    args = p.parse_args(argv)
    try:
        source = locate(args.fbgemm)
    except PeerError as exc:
        print(f"fbgemm_peer: {exc}", file=sys.stderr)
        return 2
    print(f"FBGEMM's TBE forward: {source.origin}" if source.available else f"not available: {source.reason}")
    return 0 if source.available else 2
