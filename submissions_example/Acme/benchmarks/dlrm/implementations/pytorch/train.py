"""DLRM embedding layer of the Acme submission, using the custom kernels.

Only the part of the training script that touches the custom kernels is kept
in this example; the compliance tool never runs or imports it.
"""

import torch

import acme_dlrm_embedding._C as kernels

MODE = {"sum": 0, "mean": 1}


class FixedPoolingEmbeddingBag(torch.nn.Module):
    """An embedding table whose lookups go through the custom fixed-pooling kernel."""

    def __init__(self, num_embeddings: int, dim: int, mode: str = "sum") -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(num_embeddings, dim, device="cuda"))
        self.mode = MODE[mode]

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        if int(indices.max()) >= self.weight.shape[0] or int(indices.min()) < 0:
            raise IndexError("embedding index out of range")
        return kernels.embedding_bag_fixed_forward(self.weight, indices, self.mode)
