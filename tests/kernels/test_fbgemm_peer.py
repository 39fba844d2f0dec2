"""FBGEMM as the benchmark's peer (benchmarks/fbgemm_peer.py): where the op comes from, which
cases it has, and the arguments built for it. CPU only, except the last test, which calls the
real op when its library is on hand (FBGEMM_FORWARD_DIR on a GPU machine) and skips otherwise."""

from __future__ import annotations

import lzma
import os
import tarfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from benchmarks import fbgemm_peer  # noqa: E402


@pytest.fixture
def no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without fbgemm_gpu, and nothing registered yet."""
    monkeypatch.setattr(fbgemm_peer, "_registered", lambda: False)
    monkeypatch.delenv(fbgemm_peer.ENV_DIR, raising=False)
    monkeypatch.setitem(__import__("sys").modules, "fbgemm_gpu", None)  # import fails


def test_nothing_named_means_unavailable_with_the_reason(no_package: None) -> None:
    source = fbgemm_peer.locate()
    assert not source.available and source.origin == ""
    assert fbgemm_peer.ENV_DIR in source.reason


def test_a_named_directory_that_does_not_exist_is_an_error_naming_it(no_package: None, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(fbgemm_peer.PeerError, match="nowhere: no such directory"):
        fbgemm_peer.locate(str(missing))
    monkeypatch.setenv(fbgemm_peer.ENV_DIR, str(missing))  # the environment names it the same way
    with pytest.raises(fbgemm_peer.PeerError, match="nowhere"):
        fbgemm_peer.locate()


def test_a_directory_without_the_library_names_the_missing_files(no_package: None, tmp_path: Path) -> None:
    (tmp_path / "fwd.xz").write_bytes(b"")
    with pytest.raises(fbgemm_peer.PeerError, match="missing deps.tar.xz"):
        fbgemm_peer.locate(str(tmp_path))
    with pytest.raises(fbgemm_peer.PeerError, match="missing asmjit.so, .*fbgemm_gpu_tbe_training_forward.so"):
        fbgemm_peer.library_files(tmp_path)


def test_a_corrupt_archive_is_an_error_not_a_traceback(no_package: None, tmp_path: Path) -> None:
    (tmp_path / "fwd.xz").write_bytes(b"not xz")
    (tmp_path / "deps.tar.xz").write_bytes(b"not a tar")
    with pytest.raises(fbgemm_peer.PeerError, match="cannot unpack"):
        fbgemm_peer.locate(str(tmp_path))


def test_the_packed_form_unpacks_only_the_libraries_it_names(tmp_path: Path) -> None:
    src, into = tmp_path / "packed", tmp_path / "out"
    src.mkdir()
    into.mkdir()
    for name in (*fbgemm_peer.DEPENDENCIES, "extra.so"):
        (tmp_path / name).write_bytes(name.encode())
    with tarfile.open(src / "deps.tar.xz", "w:xz") as tar:
        for name in (*fbgemm_peer.DEPENDENCIES, "extra.so"):
            tar.add(tmp_path / name, arcname=name)
    (src / "fwd.xz").write_bytes(lzma.compress(b"forward"))
    fbgemm_peer.unpack(src, into)
    assert sorted(p.name for p in into.iterdir()) == sorted((*fbgemm_peer.DEPENDENCIES, fbgemm_peer.FORWARD_LIBRARY))
    assert (into / fbgemm_peer.FORWARD_LIBRARY).read_bytes() == b"forward"
    assert fbgemm_peer.library_files(into)[fbgemm_peer.FORWARD_LIBRARY] == into / fbgemm_peer.FORWARD_LIBRARY


@pytest.mark.parametrize("mode,dtype,psw,expected", [
    ("sum", torch.float32, False, True), ("mean", torch.float16, False, True), ("sum", torch.float16, True, True),
    ("mean", torch.float32, True, False), ("max", torch.float32, False, False),
    ("sum", torch.bfloat16, False, False)])
def test_the_cases_fbgemm_has(mode: str, dtype: torch.dtype, psw: bool, expected: bool) -> None:
    assert fbgemm_peer.supports(mode, dtype, psw) is expected


def test_arguments_for_stacked_tables() -> None:
    weight = torch.zeros(10, 4, dtype=torch.float16)
    indices = torch.tensor([1, 2, 0, 3, 4, 0], dtype=torch.int32)
    offsets = torch.tensor([0, 2, 3, 4, 6])  # T = 2 tables x B = 2 bags
    psw = torch.ones(6, dtype=torch.float16)
    a = fbgemm_peer.forward_arguments(weight, [0, 6], indices, offsets, "sum", psw)
    assert a["dev_weights"].shape == (40,) and a["weights_offsets"].tolist() == [0, 24]
    assert a["D_offsets"].tolist() == [0, 4, 8] and a["D_offsets"].dtype == torch.int32
    assert (a["total_D"], a["max_D"], a["pooling_mode"], a["output_dtype"]) == (8, 4, 0, 1)
    assert a["indices"].dtype == torch.int64 and a["offsets"].dtype == torch.int64
    assert a["indice_weights"].dtype == torch.float32
    assert a["weights_placements"].tolist() == [0, 0] and a["lxu_cache_weights"].shape == (0, 0)
    assert "indice_weights" not in fbgemm_peer.forward_arguments(weight, [0, 6], indices, offsets, "mean", None)
    assert list(a)[10:13] == ["pooling_mode", "indice_weights", "lxu_cache_locations"]  # the op's order


def test_arguments_for_tables_of_mixed_widths() -> None:
    """Per-table widths (FBGEMM's native mixed D): one flat buffer, element offsets per table,
    D_offsets the running sum, max_D the widest."""
    tables = [torch.full((3, 8), 1.0), torch.full((2, 4), 2.0), torch.full((5, 8), 3.0)]
    indices, offsets = torch.zeros(6, dtype=torch.int32), torch.tensor([0, 1, 2, 3, 4, 5, 6])
    a = fbgemm_peer.mixed_forward_arguments(tables, indices, offsets, "mean", None)
    assert a["dev_weights"].tolist() == [1.0] * 24 + [2.0] * 8 + [3.0] * 40
    assert a["weights_offsets"].tolist() == [0, 24, 32]
    assert a["D_offsets"].tolist() == [0, 8, 12, 20] and (a["total_D"], a["max_D"]) == (20, 8)
    assert list(a) == list(fbgemm_peer.forward_arguments(tables[0], [0, 1, 2], indices, offsets, "mean", None))


def test_cases_it_lacks_and_bad_offsets_are_refused() -> None:
    weight = torch.zeros(10, 4)
    indices, offsets = torch.zeros(6, dtype=torch.int64), torch.tensor([0, 2, 3, 4, 6])
    with pytest.raises(ValueError, match="no max pooling"):
        fbgemm_peer.forward_arguments(weight, [0, 6], indices, offsets, "max", None)
    with pytest.raises(ValueError, match="T \\* B \\+ 1"):
        fbgemm_peer.forward_arguments(weight, [0, 3, 6], indices, offsets, "sum", None)


def test_fixed_size_bags_as_offsets() -> None:
    assert fbgemm_peer.fixed_offsets(3, 4, "cpu").tolist() == [0, 4, 8, 12]


@pytest.fixture
def real_op() -> torch.Generator:
    """FBGEMM's op loaded from $FBGEMM_FORWARD_DIR on a GPU (else the test skips), and a CUDA
    generator with a fresh seed."""
    if not os.environ.get(fbgemm_peer.ENV_DIR):
        pytest.skip(f"${fbgemm_peer.ENV_DIR} names no library")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    assert fbgemm_peer.locate().available
    return torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))


@pytest.mark.cuda
def test_the_real_op_pools_what_embedding_bag_pools(real_op: torch.Generator) -> None:
    gen = real_op
    weight = torch.randn(700 + 300, 64, device="cuda", generator=gen)
    per_table = [torch.randint(0, rows, (50 * 7,), device="cuda", generator=gen) for rows in (700, 300)]
    offsets = torch.arange(0, 2 * 50 * 7 + 1, 7, device="cuda")
    psw = torch.rand(2 * 50 * 7, device="cuda", generator=gen)
    for mode, weights in (("sum", None), ("mean", None), ("sum", psw)):
        out = fbgemm_peer.FbgemmForward(weight, [0, 700], torch.cat(per_table), offsets, mode, weights)()
        for t, (start, idx) in enumerate(zip((0, 700), per_table, strict=True)):
            w = None if weights is None else weights[t * 350:(t + 1) * 350]
            ref = torch.nn.functional.embedding_bag(idx, weight[start:start + (700, 300)[t]],
                                                    offsets[:51], mode=mode, include_last_offset=True,
                                                    per_sample_weights=w)
            torch.testing.assert_close(out[:, t * 64:(t + 1) * 64], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
def test_the_real_op_pools_tables_of_mixed_widths(real_op: torch.Generator) -> None:
    gen = real_op
    dims = [64, 4, 200, 64]
    tables = [torch.randn(300, d, device="cuda", generator=gen) for d in dims]
    indices = torch.randint(0, 300, (len(dims) * 40 * 5,), device="cuda", generator=gen)
    offsets = torch.arange(0, indices.numel() + 1, 5, device="cuda")
    out = fbgemm_peer.FbgemmForward.mixed(tables, indices, offsets, "sum")()
    assert out.shape == (40, sum(dims))
    col = 0
    for t, weight in enumerate(tables):
        ref = torch.nn.functional.embedding_bag(indices[t * 200:(t + 1) * 200], weight, offsets[:41],
                                                include_last_offset=True)
        torch.testing.assert_close(out[:, col:col + dims[t]], ref, rtol=1e-5, atol=1e-5)
        col += dims[t]
