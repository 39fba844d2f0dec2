"""A fused optimizer's state in its module's ``state_dict()`` (checkpointing).

A module with ``optimizer=`` adds four entries next to its weight: ``optimizer_state1`` and
``optimizer_state2`` (the float32 state of ``optim.new_state``: empty for SGD, one value per row
for row-wise Adagrad, two moments per element for Adam), ``optimizer_step`` (the number of
fused updates so far: Adam's bias correction and the stochastic-rounding stream depend on it)
and ``optimizer_seed`` (the stochastic-rounding seed), the last two as int64 scalar tensors.
``load_state_dict`` restores all four exactly, so that training stopped after a checkpoint and
resumed from it equals training without the stop, bit for bit. A module without an optimizer
keeps torch's state dict unchanged (none of these entries).

``save`` and ``load`` are the bodies of ``FusedOptimizerMixin._save_to_state_dict`` and
``_load_from_state_dict`` (``sparse_update.py``); ``module`` is that mixin's instance.
"""

from __future__ import annotations

from typing import Any

STATE_KEYS = ("optimizer_state1", "optimizer_state2", "optimizer_step", "optimizer_seed")


def save(module: Any, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
    """Add the optimizer's entries (creating its state first if no forward has run yet, so that
    a module's state dict has the same keys before and after training)."""
    import torch

    if module.optimizer is None:
        return
    state = module.fused_state(module.weight)
    destination[prefix + "optimizer_state1"] = state.state1 if keep_vars else state.state1.detach()
    destination[prefix + "optimizer_state2"] = state.state2 if keep_vars else state.state2.detach()
    destination[prefix + "optimizer_step"] = torch.tensor(state.step, dtype=torch.int64)
    destination[prefix + "optimizer_seed"] = torch.tensor(state.seed, dtype=torch.int64)


def load(module: Any, state_dict: dict[str, Any], prefix: str, strict: bool, missing_keys: list[str],
         unexpected_keys: list[str], error_msgs: list[str]) -> None:
    """Restore the optimizer's entries after ``nn.Module`` loaded the rest (which listed ours as
    unexpected: they are not parameters or buffers). Shapes must match the module's state."""
    if module.optimizer is None:
        return
    keys = [prefix + name for name in STATE_KEYS]
    for key in keys:
        if key in unexpected_keys:
            unexpected_keys.remove(key)
    absent = [key for key in keys if key not in state_dict]
    if absent:
        if strict:
            missing_keys.extend(absent)
        return
    state = module.fused_state(module.weight)
    loaded = [state_dict[key] for key in keys]
    for key, mine, theirs in zip(keys[:2], (state.state1, state.state2), loaded[:2], strict=True):
        if tuple(theirs.shape) != tuple(mine.shape):
            error_msgs.append(f"size mismatch for {key}: copying a param with shape {tuple(theirs.shape)} from "
                              f"checkpoint, the shape in current model is {tuple(mine.shape)} (a different optimizer "
                              f"or table size?)")
            return
    for key, value in zip(keys[2:], loaded[2:], strict=True):
        if value.numel() != 1 or value.is_floating_point():
            error_msgs.append(f"{key} must be one integer, got a tensor of shape {tuple(value.shape)} "
                              f"and dtype {value.dtype}")
            return
    import torch

    with torch.no_grad():
        state.state1.copy_(loaded[0])
        state.state2.copy_(loaded[1])
    state.step, state.seed = int(loaded[2]), int(loaded[3])
