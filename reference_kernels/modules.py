"""``nn.Module`` drop-ins: same constructor, parameters and state dict as torch's modules;
``forward`` runs the reference kernels (CUDA tensors only). ``sparse=True`` gives torch's
sparse COO gradient; ``optimizer=`` (a spec from ``reference_kernels.optim``) fuses the
optimizer into the backward instead (the weight's ``.grad`` stays None)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .api import embedding_bag_with, embedding_with
from .errors import CheckMode
from .host import LOADED as _HOST_PATH
from .index_check import FixedCheckMode
from .optim import OptimizerSpec, check_spec
from .sparse_update import FusedOptimizerMixin


class EmbeddingBag(FixedCheckMode, FusedOptimizerMixin, torch.nn.EmbeddingBag):
    """Drop-in for ``torch.nn.EmbeddingBag`` (``from_pretrained`` included) backed by the
    reference kernels. ``check_indices``: the index check's mode of every forward, resolved at
    construction (``CheckMode``, its name, True for "sync", False for "ignore"; None: the
    environment's, else "deferred"; docs/kernels.md)."""

    def __init__(self, *args: Any, optimizer: OptimizerSpec | None = None,
                 check_indices: CheckMode | str | bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.optimizer = None if optimizer is None else check_spec(optimizer)
        self.check_indices = check_indices

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:
        if _HOST_PATH and self.optimizer is None and not (host_path := _HOST_PATH[0]).is_compiling():
            served: Tensor | None = host_path.bag(input, self.weight, offsets, self.max_norm, self.scale_grad_by_freq,
                                                  self.mode, self.sparse, per_sample_weights,
                                                  self.include_last_offset, self.padding_idx, self._check_mode)
            if served is not None:
                return served
        return embedding_bag_with(input, self.weight, offsets, max_norm=self.max_norm, norm_type=self.norm_type,
                                  scale_grad_by_freq=self.scale_grad_by_freq, mode=self.mode, sparse=self.sparse,
                                  per_sample_weights=per_sample_weights, include_last_offset=self.include_last_offset,
                                  padding_idx=self.padding_idx, check_indices=self._check_mode,
                                  fused=self.fused_state(self.weight))


class Embedding(FixedCheckMode, FusedOptimizerMixin, torch.nn.Embedding):
    """Drop-in for ``torch.nn.Embedding`` backed by the reference gather kernel
    (``check_indices`` as ``EmbeddingBag``'s)."""

    def __init__(self, *args: Any, optimizer: OptimizerSpec | None = None,
                 check_indices: CheckMode | str | bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.optimizer = None if optimizer is None else check_spec(optimizer)
        self.check_indices = check_indices

    def forward(self, input: Tensor) -> Tensor:
        return embedding_with(input, self.weight, padding_idx=self.padding_idx, max_norm=self.max_norm,
                              norm_type=self.norm_type, scale_grad_by_freq=self.scale_grad_by_freq,
                              sparse=self.sparse, check_indices=self._check_mode,
                              fused=self.fused_state(self.weight))
