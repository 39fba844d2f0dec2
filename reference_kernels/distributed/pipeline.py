"""Overlap the next batch's sparse forward with this batch's dense optimizer step (the idea of
TorchRec's ``TrainPipelineFusedSparseDist``).

With the optimizer fused into the embedding backward, the tables are final for batch i as soon
as ``loss.backward()`` has run their update; batch i+1's input exchange, lookups and output
exchange need not wait for batch i's dense optimizer. ``SparseForwardPipeline.prefetch`` issues
them on a side CUDA stream right after the backward; the default stream meanwhile runs what is
left of batch i (the rest of the dense backward, DDP's all-reduce, the optimizer step).
``take()`` hands the pooled rows to the default stream. The side stream is ordered after batch
i's fused updates without an explicit wait: those ran on it (autograd runs an op's backward on
its forward's stream), so the result is the plain loop's, bit for bit. Off CUDA ``prefetch``
simply runs the forward. Each step then holds two batches' embedding activations (the next
batch's ``[B, sum(dims)]`` rows and its lookups' saved inputs), not a copy of any table.

    pipe = SparseForwardPipeline(embeddings)
    pipe.prefetch(batches[0].indices, batches[0].offsets)
    for i, batch in enumerate(batches):
        emb = pipe.take()
        loss = loss_fn(dense(batch, emb), batch.labels)
        loss.backward()                          # fused embedding update of batch i
        if i + 1 < len(batches):
            pipe.prefetch(batches[i + 1].indices, batches[i + 1].offsets)
        dense_opt.step()                         # overlaps batch i+1's sparse forward
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class SparseForwardPipeline:
    """See the module docstring; ``embeddings``: a ``ShardedTableBatchedEmbeddingBag`` (or any
    module called with (indices, offsets))."""

    def __init__(self, embeddings: Any, device: Any = None) -> None:
        self.embeddings = embeddings
        device = torch.device(device) if device is not None else embeddings.dropped_lookups.device
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None  # type: ignore[no-untyped-call]
        self.pending: Tensor | None = None

    def prefetch(self, indices: Tensor, offsets: Tensor, inputs_ready: bool = False) -> None:
        """Start the next batch's sparse forward (after this batch's backward). The side stream
        first waits for everything queued on the current stream (the dense backward's tail), so
        inputs made there are safe; ``inputs_ready=True`` (inputs prepared and synchronised
        ahead) skips that wait, and the forward overlaps the dense backward's tail as well."""
        if self.pending is not None:
            raise RuntimeError("take() the prefetched batch before prefetching another")
        if self.side is None:
            self.pending = self.embeddings(indices, offsets)
            return
        if not inputs_ready:
            self.side.wait_stream(torch.cuda.current_stream(self.side.device))
        with torch.cuda.stream(self.side):
            self.pending = self.embeddings(indices, offsets)

    def take(self) -> Tensor:
        """The prefetched pooled rows, usable on the current stream."""
        if self.pending is None:
            raise RuntimeError("nothing prefetched")
        out, self.pending = self.pending, None
        if self.side is not None:
            current = torch.cuda.current_stream(self.side.device)
            current.wait_stream(self.side)
            out.record_stream(current)
        return out
