"""GPU test: examples/dlrm trains with both embedding paths (the test-sized variant, 200 steps):
the loss curves agree step by step within the example's tolerance and both learn the
planted signal (held-out AUC well above 0.5). Skipped without a GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dlrm" / "dlrm.py"


def load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("dlrm_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dlrm_example"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.cuda
def test_dlrm_example_trains_the_same_with_both_embedding_paths() -> None:
    dlrm = load_example()
    cfg = dlrm.Config.small()
    assert cfg.steps == 200
    result = dlrm.run_both(cfg)
    assert len(result["ours"]["losses"]) == len(result["torch"]["losses"]) == 200
    assert result["max_loss_diff"] <= dlrm.LOSS_TOLERANCE, result["max_loss_diff"]
    for name in ("ours", "torch"):  # steps/s over the steps after the warm-up (which compiles the kernels)
        assert (result[name]["warmup_steps"], result[name]["timed_steps"]) == (20, 180), result[name]
    for name in ("ours", "torch"):
        assert result[name]["auc"] > 0.65, (name, result[name]["auc"])
        losses = result[name]["losses"]
        assert sum(losses[-20:]) < sum(losses[:20]), "the loss must fall"


def test_auc_matches_the_pairwise_definition() -> None:
    dlrm = load_example()
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (300,), generator=gen).float()  # many ties
    labels = torch.bernoulli(torch.full((300,), 0.4), generator=gen)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()
    assert dlrm.auc(scores, labels) == pytest.approx(float(pairs.mean()), abs=1e-12)
