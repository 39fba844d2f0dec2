"""The nvcc sweep's selection (tests/kernels/nvcc_sweep.py): a variant is compiled when its key
(source with its headers, architecture, options, criterion) is in neither the manifest nor the
local cache, plus a seeded sample of the known ones; NVCC_SWEEP=all compiles every one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernels import nvcc_sweep


@pytest.fixture
def kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A kernel directory of its own, an empty manifest and an empty cache."""
    source = tmp_path / "kernels"
    source.mkdir()
    (source / "common.cuh").write_text("#define X 1\n")
    (source / "a.cu").write_text('#include "common.cuh"\n__global__ void a() {}\n')
    (source / "b.cu").write_text("__global__ void b() {}\n")
    monkeypatch.setattr(nvcc_sweep, "KERNEL_DIR", source)
    monkeypatch.setattr(nvcc_sweep, "MANIFEST", tmp_path / "sweep.keys")
    monkeypatch.setenv("NVCC_SWEEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NVCC_SWEEP", raising=False)
    monkeypatch.setattr(nvcc_sweep, "SAMPLE", 2)
    monkeypatch.setattr(nvcc_sweep, "SUMMARY", [])
    nvcc_sweep.source_digest.cache_clear()
    yield source
    nvcc_sweep.source_digest.cache_clear()


def _jobs() -> list[nvcc_sweep.Job]:
    return [nvcc_sweep.Job(src, f"-DN={n}", "sm_90") for src in ("a.cu", "b.cu") for n in range(5)]


def test_only_what_changed_and_a_sample_is_compiled(kernels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _jobs()
    assert nvcc_sweep.select("t", jobs) == jobs  # nothing known yet: everything
    nvcc_sweep.record("t", jobs, jobs)
    assert nvcc_sweep.manifest() == {}  # recorded only when asked
    monkeypatch.setenv("NVCC_SWEEP_RECORD", "1")
    nvcc_sweep.record("t", jobs, jobs)
    monkeypatch.delenv("NVCC_SWEEP_RECORD")
    assert set(nvcc_sweep.manifest()) == {job.key for job in jobs}

    chosen = nvcc_sweep.select("t", jobs)
    assert len(chosen) == 2 and set(chosen) <= set(jobs)  # the sample alone
    assert nvcc_sweep.select("t", jobs) == chosen  # the same seed, the same sample

    old_a_keys = {job.key for job in jobs if job.source == "a.cu"}
    (kernels / "common.cuh").write_text("#define X 2\n")  # a header that a.cu includes
    nvcc_sweep.source_digest.cache_clear()
    edited = _jobs()
    chosen = nvcc_sweep.select("t", edited)
    assert chosen[:5] == [job for job in edited if job.source == "a.cu"] and len(chosen) == 7
    nvcc_sweep.remember(chosen[:5])  # the local cache: passed here, not compiled again
    assert len(nvcc_sweep.select("t", edited)) == 2

    stricter = [nvcc_sweep.Job(job.source, job.flags, job.arch, "spills allowed: none") for job in jobs]
    assert len(nvcc_sweep.select("t", stricter)) == len(jobs)  # another verdict: another key

    monkeypatch.setenv("NVCC_SWEEP_RECORD", "1")  # a record after the edit: the cache's passes count
    nvcc_sweep.record("t", edited, [])
    recorded = set(nvcc_sweep.manifest())
    assert {job.key for job in edited if job.source == "a.cu"} <= recorded  # the cache's passes
    assert {job.key for job in edited if job.source == "b.cu"} <= recorded  # unchanged keys stay
    assert not recorded & old_a_keys  # a.cu's old keys drop out


def test_the_exhaustive_mode_compiles_everything_and_a_bad_mode_is_refused(
        kernels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _jobs()
    nvcc_sweep.remember(jobs)
    monkeypatch.setenv("NVCC_SWEEP", "all")
    assert nvcc_sweep.select("t", jobs) == jobs
    monkeypatch.setenv("NVCC_SWEEP", "some")
    with pytest.raises(ValueError, match="NVCC_SWEEP='some'"):
        nvcc_sweep.select("t", jobs)


def test_each_test_keeps_its_own_section_of_the_manifest(kernels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _jobs()
    monkeypatch.setenv("NVCC_SWEEP_RECORD", "1")
    nvcc_sweep.record("u", jobs[5:], jobs[5:])
    nvcc_sweep.record("t", jobs[:5], jobs[:5])
    assert nvcc_sweep.manifest() == {**{job.key: "t" for job in jobs[:5]}, **{job.key: "u" for job in jobs[5:]}}
    lines = nvcc_sweep.MANIFEST.read_text().splitlines()
    assert lines[1] == "[t]" and lines[7] == "[u]" and len(lines) == 13  # a header, then each test's keys
    nvcc_sweep.MANIFEST.write_text("# no section\n" + jobs[0].key + "\n")
    with pytest.raises(ValueError, match=r"sweep.keys:2: a key before the first \[test\] line"):
        nvcc_sweep.manifest()
