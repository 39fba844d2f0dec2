import torch


def emb_sum(weight, indices, out):
    out.copy_(torch.nn.functional.embedding_bag(indices, weight, mode="sum"))
    return out
