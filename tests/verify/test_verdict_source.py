"""Issue 40 (verdicts come only from the verifier's process) and issue 35 (a run that verified nothing
never says PASS): the progress pipe drops what is not an event; a result file the kernel's process
forged or garbled is a failure, never an error of the tool; no GPU is decided by the verifier and
gives exit 4 unless --allow-unverified."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the judge compares tensors

from click.testing import CliRunner, Result  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from compliance.cli.main import cli  # noqa: E402
from compliance.verify.cases import Case  # noqa: E402
from compliance.verify.driver import ProgressReader  # noqa: E402
from compliance.verify.judge import judge, prepare, read_result  # noqa: E402
from compliance.verify.tolerance import DEFAULT_BOUNDS  # noqa: E402

from .conftest import CUDA_TREE, RULES  # noqa: E402

GATHER = Case(id="g", op="embedding", mode="", layout="flat", weight_dtype="float32", index_dtype="int64",
              num_embeddings=50, dim=4, num_bags=6, pooling=1, seed=5)


def _events(chunks: list[bytes]) -> tuple[list[dict[str, object]], int]:
    read_fd, write_fd = os.pipe()

    def write() -> None:  # beside the reader: a pipe holds 64 KiB
        for chunk in chunks:
            os.write(write_fd, chunk)
        os.close(write_fd)

    writer = threading.Thread(target=write)
    writer.start()
    reader = ProgressReader(read_fd)
    try:
        events = [e for e in reader.events(lambda: time.monotonic() + 5) if e is not None]
    finally:
        writer.join()
        os.close(read_fd)
    return events, reader.dropped


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=5))
def test_progress_pipe_never_breaks_on_garbage(noise: list[bytes]) -> None:
    good = b'{"event": "case-done", "index": 0}\n'
    events, _ = _events([*noise, b"\n", good])
    assert events[-1] == {"event": "case-done", "index": 0}
    assert all(isinstance(e.get("event"), str) for e in events)


def test_non_events_are_dropped() -> None:
    events, dropped = _events([b"not json\n[1]\n{\"event\": 5}\n\xff\xfe\n", b"x" * (1 << 21), b"\n"])
    assert events == [] and dropped >= 4


def _correct_run(prepared: object) -> dict[str, object]:
    """What an honest kernel's process would send back for the gather case."""
    sent = prepared.sent  # type: ignore[attr-defined]
    buffers = {k: g.buffer.clone() for k, g in sent.items()}
    out = buffers["out"][64:64 + sent["out"].view.numel()].view(sent["out"].view.shape)
    out.copy_(prepared.inputs.reference.to(torch.float32))  # type: ignore[attr-defined]
    return {"buffers": buffers, "returned": [], "given_storage": {}, "earlier_storage": [], "seconds": 0.0}


def test_judged_from_tensors_only(tmp_path: Path) -> None:
    prepared = prepare(GATHER, DEFAULT_BOUNDS["float32"], returns_output=False)
    run = _correct_run(prepared)
    assert judge(prepared, [run, run])["status"] == "pass"
    zeros = _correct_run(prepared)
    zeros["buffers"]["out"][64:-64] = 0  # type: ignore[index]
    verdict = judge(prepared, [zeros, zeros])
    assert {p["rule"] for p in verdict["problems"]} == {"verify-mismatch"}
    garbled = tmp_path / "out.pt"
    garbled.write_bytes(b'{"status": "pass"}')
    unreadable = read_result(garbled)
    assert isinstance(unreadable, str)
    for forged in (unreadable, {"status": "pass"}, {"buffers": {"out": "pass"}}, {"error": {"kind": "x"}},
                   {"error": "pass"}, {**run, "buffers": []}, {**run, "buffers": {"out": "pass"}}):
        verdict = judge(prepared, [forged, forged])  # type: ignore[list-item]
        assert verdict["status"] == "fail" and verdict["problems"], forged


needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the kernels would run")


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@needs_no_gpu
def test_no_gpu_is_not_verified_exit_4(tmp_path: Path) -> None:
    base = ["verify", str(CUDA_TREE), "--rules", RULES, "--build-dir", str(tmp_path), "--kernel", "nvrtc-good"]
    run = _cli(*base)
    assert run.exit_code == 4, run.output
    assert "skipped (no GPU)" in run.stderr and "verify-not-run" in run.stdout
    assert run.stdout.startswith("compliance verify ")
    allowed = _cli(*base, "--allow-unverified")
    assert allowed.exit_code == 0 and "verify-skipped" in allowed.stdout, allowed.output
    check = _cli("check", str(CUDA_TREE), "--rules", RULES, "--verify", "--format", "json")
    assert check.exit_code == 1 and '"verify-not-run"' in check.stdout
    assert list(tmp_path.iterdir()) == []  # nothing was built: the verifier decided before any process
