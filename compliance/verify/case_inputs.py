"""What a case's inputs are, below the code that makes them (``tensors``) and the backward's
(``backward``): the dtype names, the inputs record and the rows a lookup reads. Both modules import
it, so neither imports the other's caller (no import circle). Imported only in the kernel subprocess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from compliance.verify.cases import Case

DTYPES: Mapping[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16,
                                     "bfloat16": torch.bfloat16, "int8": torch.int8, "int32": torch.int32,
                                     "int64": torch.int64}


@dataclass
class CaseInputs:
    """The pristine inputs of one case, on the CPU."""

    weight: torch.Tensor
    """[N, D] table in the weight dtype (large case: [len(rows), D], the referenced rows)."""
    indices: torch.Tensor
    """[B, L] or [n] in the index dtype."""
    offsets: torch.Tensor | None
    """csr offsets or None."""
    psw: torch.Tensor | None
    """per_sample_weights or None."""
    rows: torch.Tensor
    """Sorted distinct rows the indices reference (for the large table)."""
    reference: torch.Tensor
    """float64 expected output (CPU)."""
    bound: torch.Tensor
    """float64 per-element error bound (CPU)."""
    out_shape: tuple[int, ...]
    """Shape the output must have."""
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    """Further input tensors by vocabulary name (table offsets, grad_out, momentum)."""
    half_sum: torch.Tensor | None = None
    """The output of summing in the 16-bit dtype (diagnosis of verify-mismatch), else None."""
    expected: dict[str, Any] = field(default_factory=dict)
    """Backward: what the in-place comparison needs (compliance.verify.backward)."""
    dequantize: torch.Tensor | None = None
    """Quantized (int8) output: the factor that turns each output code into its value (1 / the inverse
    output scale of its table); ``reference`` and ``bound`` are values. None: a float output."""


def table_of_lookup(case: Case) -> torch.Tensor:
    """The table (0..T-1) each index belongs to, in the order of the indices."""
    n, tables = case.num_indices, case.num_tables
    if tables == 1:
        return torch.zeros(n, dtype=torch.int64)
    if case.layout == "csr":  # bag t * B + b
        bag = torch.repeat_interleave(torch.arange(len(case.bag_lengths)), torch.tensor(case.bag_lengths))
        return bag // case.batch_size
    return (torch.arange(n) // case.pooling) % tables  # [B, T * L], sample-major


def absolute_rows(case: Case, indices: torch.Tensor) -> torch.Tensor:
    """Rows of the stacked buffer the indices point at, flat, int64."""
    flat = indices.reshape(-1).to(torch.int64)
    if case.absolute_indices or case.num_tables == 1:
        return flat
    return flat + torch.tensor(case.row_offsets, dtype=torch.int64)[table_of_lookup(case)]


def table_of_row(case: Case) -> torch.Tensor:
    """The table (0..T-1) of every row of the stacked buffer."""
    sizes = torch.tensor(case.table_rows or (case.num_embeddings,))
    return torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
