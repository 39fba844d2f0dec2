"""examples/dlrm/dlrm_sharded.py on gloo ranks forked from the test process (docs/sharding.md,
"Loss curves"): N ranks do exactly the arithmetic of one process doing N ranks' work
(``--as-ranks N``: the global batch as N micro-batches, dense gradients combined as DDP combines
them, tables grouped as the ranks group them): the same losses and dense weights, float for
float. That separates "the distributed machinery is exact" from "another float order"; the
second is what the noise tolerance against the full-batch curve covers (examples/dlrm/loss_curves.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from tests.distributed.launch import run_example_forked  # noqa: E402

# the small tables at dim 4 (26 tables, the dense part 13-64-4, cross 108 wide): a second per run
TINY = ["--dim", "4", "--block", "16", "--steps", "5", "--warmup", "0"]
# DCNv2's tables (rows x 0.0005, dim 8) and its dense part (bottom 512-256-8, cross 216 wide of
# rank 512, top 1024-1024-512-256): the model the GPU runs train, small
DCN = ["--dcnv2-scale", "0.0005", "--dim", "8", "--block", "16", "--steps", "16", "--warmup", "0"]


def run(tmp: Path, name: str, world: int, args: list[str]) -> dict[str, Any]:
    out = tmp / f"{name}.json"
    codes = run_example_forked(world, [*args, "--json", str(out)])
    assert codes == [0] * world, f"{name}: exit codes {codes}"
    return dict(json.loads(out.read_text()))


def assert_same_floats(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["losses"] == b["losses"]
    assert a["dense_sha256"] == b["dense_sha256"]


@pytest.mark.slow  # ~4 s on an idle 2-core machine, most of it torch._dynamo's import (DDP, optimizers)
def test_two_ranks_are_one_process_doing_their_arithmetic(tmp_path: Path) -> None:
    """2 gloo ranks at local batch 32 = one process with --as-ranks 2 at 32: every step's loss
    and the dense weights at the end, bit for bit (and --check with no noise runs says so)."""
    reference = run(tmp_path, "as2", 1, [*TINY, "--batch", "32", "--as-ranks", "2"])
    two = run(tmp_path, "n2", 2, [*TINY, "--batch", "32", "--check", str(tmp_path / "as2.json")])
    assert_same_floats(reference, two)
    assert two["max_loss_diff"] == 0.0 and len(two["losses"]) == 5


@pytest.mark.slow
def test_four_ranks_are_one_process_doing_their_arithmetic(tmp_path: Path) -> None:
    """4 gloo ranks with --ordered-allreduce (DDP's mean summed in rank order) = --as-ranks 4,
    float for float, on DCNv2's model; gloo's own all-reduce of 4 gradients adds in its order,
    which the noise tolerance covers."""
    reference = run(tmp_path, "as4", 1, [*DCN, "--batch", "32", "--as-ranks", "4"])
    four = run(tmp_path, "n4", 4, [*DCN, "--batch", "32", "--ordered-allreduce"])
    assert_same_floats(reference, four)


@pytest.mark.slow
def test_two_ranks_follow_the_full_batch_within_the_noise_tolerance(tmp_path: Path) -> None:
    """DCNv2's model: N = 2 (and one process doing its arithmetic) differs from the full-batch
    N = 1 curve (float order), and lies within max(FLOOR, FACTOR x envelope) of it, the envelope
    measured by runs of N = 1 with only the float order changed."""
    full = run(tmp_path, "n1", 1, [*DCN, "--batch", "128"])
    noise = [run(tmp_path, "rev", 1, [*DCN, "--batch", "128", "--reverse-blocks"]),
             run(tmp_path, "as8", 1, [*DCN, "--batch", "16", "--as-ranks", "8"])]
    two = run(tmp_path, "n2", 2, [*DCN, "--batch", "64", "--check", str(tmp_path / "n1.json"), "--noise",
                                  str(tmp_path / "rev.json"), str(tmp_path / "as8.json")])
    assert two["losses"] != full["losses"]  # another float order: the exact check would be wrong here
    assert all(run_["losses"] != full["losses"] for run_ in noise)
