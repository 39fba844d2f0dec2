"""``nn.Module`` drop-ins: same constructor, parameters and state dict as torch's modules;
``forward`` runs the reference kernels (CUDA tensors only)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ._api import embedding, embedding_bag


class EmbeddingBag(torch.nn.EmbeddingBag):
    """Drop-in for ``torch.nn.EmbeddingBag`` (``from_pretrained`` included) backed by the
    reference kernels. ``check_indices`` (default: on unless REFERENCE_KERNELS_SKIP_INDEX_CHECK=1)
    runs the separate index-range pass before each lookup."""

    check_indices: Optional[bool] = None

    def forward(self, input: Tensor, offsets: Optional[Tensor] = None,
                per_sample_weights: Optional[Tensor] = None) -> Tensor:
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                             self.scale_grad_by_freq, self.mode, self.sparse, per_sample_weights,
                             self.include_last_offset, self.padding_idx, check_indices=self.check_indices)


class Embedding(torch.nn.Embedding):
    """Drop-in for ``torch.nn.Embedding`` backed by the reference gather kernel."""

    check_indices: Optional[bool] = None

    def forward(self, input: Tensor) -> Tensor:
        return embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                         self.scale_grad_by_freq, self.sparse, check_indices=self.check_indices)
