"""The fixed argument vocabulary a manifest's ``build:`` block may use.

Tensors are handed to the kernel (as device pointers for NVRTC kernels, as
``torch.Tensor`` objects for extensions); scalars are integers that describe the
case and may appear in launch expressions; selectors are the case variables a
``defines`` entry may switch on. Everything here is plain Python (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping

TENSORS: Mapping[str, str] = {
    "weight": "the embedding table [num_embeddings, dim], contiguous, weight dtype",
    "indices": "indices: [num_bags, pooling] (fixed layout, batched embedding) or "
               "[num_indices] (csr layout, flat embedding), index dtype",
    "offsets": "csr offsets [num_offsets], index dtype; null pointer / None in the fixed layout",
    "per_sample_weights": "weights like indices, weight dtype; null / None when the case has none",
    "out": "the output, prefilled with NaN: [num_bags, dim], or [num_indices, dim] / "
           "[num_bags, pooling, dim] for embedding",
    "grad_out": "backward: the gradient of the forward output, shaped like it, output dtype",
    "table_offsets": "table-batched: row offset of each table in the stacked weight, [num_tables + 1] int64 "
                     "(the last entry is total_rows); one table: [0, num_embeddings]",
    "weights_offsets": "table-batched: element offset of each table (row offset * dim), [num_tables] int64 "
                       "(FBGEMM's weights_offsets)",
    "momentum": "rowwise_adagrad: the optimizer state, one float32 per row [total_rows], updated in place",
    "weight_scales": "quantized tables with scales_in tensor: float32 [num_tables] (table-wise), [total_rows, 2] "
                     "(row-wise scale and bias) or [total_rows] (row-wise scale)",
    "output_inverse_scales": "quantized output (int8): each table's inverse output scale, float32 [num_tables]",
    "null": "a null pointer (NVRTC) or None (extension), for arguments the verifier does not use",
}
"""Tensor names and what they hold."""

SCALARS: Mapping[str, str] = {
    "num_embeddings": "rows of the table",
    "dim": "columns of the table (embedding dimension)",
    "num_bags": "bags (embedding_bag) or output rows before dim (embedding: num_indices flat, "
                "batch size batched)",
    "pooling": "indices per bag in the fixed layout (L), per sample for batched embedding; "
               "0 for csr, 1 for flat embedding",
    "num_indices": "number of indices (all bags together)",
    "num_offsets": "entries in offsets: num_bags, or num_bags + 1 with include_last_offset; 0 fixed",
    "padding_idx": "the padding row, -1 when the case has none",
    "mode": "0 sum, 1 mean, 2 max (0 for embedding)",
    "include_last_offset": "1 when offsets has the trailing entry, else 0",
    "has_per_sample_weights": "1 when per_sample_weights is given, else 0",
    "csr": "1 for the csr layout, 0 for fixed",
    "weight_dtype": "0 float32, 1 float16, 2 bfloat16",
    "weight_elem_size": "bytes per weight element (4 or 2)",
    "output_dtype": "dtype of the output / gradient: 0 float32, 1 float16, 2 bfloat16",
    "output_elem_size": "bytes per output element (4 or 2)",
    "num_tables": "tables in the weight buffer (1 unless table-batched)",
    "batch_size": "samples: bags per table (num_bags / num_tables)",
    "total_rows": "rows of the whole weight buffer (= num_embeddings)",
    "index_elem_size": "bytes per index (4 or 8)",
    "row_bytes": "bytes per row of the weight: dim * element size, or a quantized row's bytes (codes, the fused "
                 "scale and bias, padding)",
}
"""Integer names available in expressions and as scalar arguments."""

FLOAT_SCALARS: Mapping[str, str] = {
    "learning_rate": "fused optimizer updates: the step size (float32 for NVRTC, a Python float otherwise)",
    "eps": "rowwise_adagrad: the epsilon added to the root of the accumulator",
    "weight_scale": "quantized table with scales_in argument: the table's scale",
    "output_inverse_scale": "quantized int8 output with scales_in argument: the inverse output scale",
}
"""Floating-point scalars: arguments only, never in integer expressions."""

SELECTORS: Mapping[str, tuple[str, ...]] = {
    "weight_dtype": ("float32", "float16", "bfloat16"),
    "index_dtype": ("int32", "int64"),
    "mode": ("sum", "mean", "max"),
    "layout": ("fixed", "csr"),
    "output_dtype": ("float32", "float16", "bfloat16", "int8"),
    "weight_format": ("float32", "float16", "bfloat16", "int8", "int4", "fp8_e4m3"),
}
"""Case variables a ``defines`` entry may select on, with their values."""

MODE_CODES: Mapping[str, int] = {"sum": 0, "mean": 1, "max": 2}
WEIGHT_CODES: Mapping[str, int] = {"float32": 0, "float16": 1, "bfloat16": 2, "int8": 3}
"""dtype codes (``weight_dtype``, ``output_dtype``); int8 is a quantized output."""
ELEM_SIZE: Mapping[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int32": 4, "int64": 8}
UNIT_ROUNDOFF: Mapping[str, float] = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
"""Unit roundoff u of each weight dtype (half the distance from 1 to the next number)."""

SCALAR_TYPES: Mapping[str, str] = {"int32": "i", "int64": "q", "uint32": "I", "uint64": "Q", "bool": "?"}
"""C scalar types an NVRTC argument may be passed as (struct format codes)."""
