"""MLPerf DLRM-DCNv2's embedding tables (Criteo 1TB, ids hashed to at most 40M rows per table).

Row counts and multi-hot sizes as the MLPerf training reference passes them
(mlcommons/training, recommendation_v2/torchrec_dlrm/README.MD: ``--num_embeddings_per_feature``
and ``--multi_hot_sizes`` of the DLRM v2 benchmark); dim 128, float32, row-wise Adagrad.
204,184,588 rows: 104.5 GB of weights, 0.8 GB of Adagrad state.
"""

from __future__ import annotations

from .planner import TableSpec

ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938, 155, 4,
        976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
MULTI_HOT = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
DIM = 128


def tables(dim: int = DIM, rows_scale: float = 1.0) -> list[TableSpec]:
    """The 26 tables (``rows_scale`` < 1 shrinks each, at least one row: the scaled-down runs);
    pooling factor = max bag size = the table's multi-hot size."""
    return [TableSpec(f"t{t:02d}", max(1, int(rows * rows_scale)), dim, float(hot), hot)
            for t, (rows, hot) in enumerate(zip(ROWS, MULTI_HOT, strict=True))]
