"""The verifier's process hygiene and evidence machinery, without building a kernel (issue 50).

The end-to-end hostile kernels are in ``test_hostile.py`` (slow: they build an extension)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compliance.engine import build_context
from compliance.ruleset import load_ruleset
from compliance.verify.coverage import missing
from compliance.verify.evidence import (
    PROBE_FD,
    CallRecord,
    ProbeRecords,
    SymbolMap,
    base_name,
    build_probe,
    entry_problem,
)
from compliance.verify.hygiene import Reaper, TreeSnapshot, descendants, kernel_environment, scrub
from compliance.verify.staging import Artefact, ArtefactChanged, RunDirectory, hand_over, verify_artefact

from .conftest import FIXTURES

HOSTILE_TREE = FIXTURES / "hostile"


def test_kernel_environment_is_an_allowlist() -> None:
    operator = {"PATH": "/usr/bin", "HOME": "/home/op", "GITHUB_TOKEN": "ghp_secret_value",
                "COMPLIANCE_VERIFY_EVENT_FD": "7", "COMPLIANCE_BUILD_DIR": "/cache", "LC_ALL": "C",
                "AWS_SECRET_ACCESS_KEY": "abcdefgh", "CUDA_VISIBLE_DEVICES": "0"}
    env = kernel_environment(operator)
    assert {"PATH", "HOME", "LC_ALL", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"} <= set(env)
    assert not any(k.startswith("COMPLIANCE_") or "TOKEN" in k or "SECRET" in k for k in env)


def test_scrub_replaces_the_values_the_kernel_was_not_given() -> None:
    operator = {"GITHUB_TOKEN": "ghp_secret_value", "HOME": "/home/op", "SHORT": "abc"}
    text = "auth failed for ghp_secret_value in /home/op (abc)"
    assert scrub(text, operator) == "auth failed for $GITHUB_TOKEN in /home/op (abc)"


def test_tree_snapshot_sees_added_changed_and_restored_files(tmp_path: Path) -> None:
    (tmp_path / "a.cu").write_text("zeros")
    before = TreeSnapshot.take(tmp_path, ["a.cu"])
    (tmp_path / "planted.txt").write_text("x")
    stat = (tmp_path / "a.cu").stat()
    (tmp_path / "a.cu").write_text("honst")  # same size, then the time stamps put back
    os.utime(tmp_path / "a.cu", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changes = before.changes(TreeSnapshot.take(tmp_path, ["a.cu"]))
    assert changes == ["added planted.txt", "changed a.cu"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc are Linux")
def test_reaper_kills_a_detached_daemon() -> None:
    reaper = Reaper.start()
    assert reaper.subreaper
    # A child that double-forks a daemon in a new session and exits at once: the daemon is reparented here.
    script = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        time.sleep(600)\n    os._exit(0)\n")
    subprocess.run([sys.executable, "-c", script], check=True)
    time.sleep(0.3)
    new = [p for p in descendants(os.getpid()) if p not in reaper.before]
    assert new, "the daemon was not reparented to this process"
    killed = reaper.kill_new()
    assert set(new) <= set(killed)
    time.sleep(0.1)
    assert not [p for p in descendants(os.getpid()) if p not in reaper.before]


def test_staged_copy_is_private_and_checked(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "k.cpp").write_text("int k;")
    (tree / "csrc" / "undeclared.cpp").write_text("int u;")
    run = RunDirectory.create(tmp_path / "builds")
    staged = run.stage(tree, ["csrc/k.cpp"])
    assert (staged.root / "csrc" / "k.cpp").read_text() == "int k;"
    assert not (staged.root / "csrc" / "undeclared.cpp").exists()
    (tree / "csrc" / "k.cpp").write_text("int forged;")  # the tree changes later: the copy does not
    assert (staged.root / "csrc" / "k.cpp").read_text() == "int k;"
    run.check_staged(staged)
    os.chmod(staged.root / "csrc", 0o700)
    os.chmod(staged.root / "csrc" / "k.cpp", 0o600)
    (staged.root / "csrc" / "k.cpp").write_text("int forged;")
    with pytest.raises(ArtefactChanged):
        run.check_staged(staged)


def test_a_changed_build_product_is_never_handed_over(tmp_path: Path) -> None:
    module = tmp_path / "m.so"
    module.write_bytes(b"built")
    import hashlib

    artefact = Artefact(module, "m", hashlib.sha256(b"built").hexdigest(), tmp_path, 0.0)
    verify_artefact(artefact)
    (tmp_path / "out").mkdir()
    assert hand_over(artefact, tmp_path / "out").read_bytes() == b"built"
    module.write_bytes(b"poisoned")
    with pytest.raises(ArtefactChanged):
        hand_over(artefact, tmp_path / "out2")


def test_probe_records_parse_per_call() -> None:
    records = ProbeRecords()
    records.feed(b"B 0 0\nF /x/m.so\t1a0\nK _Z9bag_kernelPKfPf\nE 0 0\nB 0 1\nF /x/m.so\t1a")
    records.feed(b"0\nE 0 1\nB 1 0\nK other\n")
    assert records.calls[(0, 0)].functions == {("/x/m.so", 0x1A0)} and records.calls[(0, 0)].complete
    assert records.calls[(0, 0)].launches == {"_Z9bag_kernelPKfPf"}
    assert records.calls[(0, 1)].complete and not records.calls[(1, 0)].complete


@pytest.mark.parametrize(("symbol", "name"), [
    ("void bag_entry<(Flaw)0>(at::Tensor, long)", "bag_entry"), ("forged::bag_fwd(at::Tensor)", "bag_fwd"),
    ("embedding_bag_forward", "embedding_bag_forward"),
    ("void ns::k<float, std::pair<int, int> >(float const*, float*)", "k"),
    ("(anonymous namespace)::honest(at::Tensor)", "honest")])
def test_base_name(symbol: str, name: str) -> None:
    assert base_name(symbol) == name


def test_launch_evidence_requires_a_declared_kernel() -> None:
    honest = CallRecord(launches={"_Z20embedding_bag_kernelIfEvPKT_PS0_"}, complete=True)
    assert entry_problem(honest, ["embedding_bag_kernel"], None, gpu=True) is None
    torch_only = CallRecord(launches={"_ZN2at6native37_GLOBAL__N__embedding_bag_kernel_sumIfEEvv"}, complete=True)
    why = entry_problem(torch_only, ["embedding_bag_kernel"], None, gpu=True)
    assert why is not None and "other code" in why
    assert "recorded nothing" in str(entry_problem(None, ["k"], None, gpu=True))


def test_cpu_evidence_requires_the_entry_from_the_sources() -> None:
    symbols = SymbolMap(Path("/x/m.so"), {0x10: "bag_fwd(at::Tensor)", 0x20: "forged::bag_fwd(at::Tensor)",
                                          0x30: "shim_honest(at::Tensor)"}, frozenset({"bag_fwd(at::Tensor)"}))
    assert entry_problem(CallRecord({("/x/m.so", 0x10)}, complete=True), ["bag_fwd"], symbols, gpu=False) is None
    shim = entry_problem(CallRecord({("/x/m.so", 0x20)}, complete=True), ["bag_fwd"], symbols, gpu=False)
    assert shim is not None and "outside the kernel's declared sources" in shim
    other = entry_problem(CallRecord({("/x/m.so", 0x30)}, complete=True), ["bag_fwd"], symbols, gpu=False)
    assert other is not None and "shim_honest" in other


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD probe is Linux")
def test_probe_records_instrumented_functions_through_its_own_pipe(tmp_path: Path) -> None:
    """The probe, preloaded into a plain Python process, records the functions of an instrumented
    library entered between two marks, and writes them to its pipe, not to the process's output."""
    probe = build_probe(tmp_path, gpu=False)
    if isinstance(probe, str):
        pytest.skip(probe)
    lib = tmp_path / "libk.so"
    (tmp_path / "k.c").write_text("int entry_fn(int x) { return x + 1; }\nint other_fn(int x) { return x; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-finstrument-functions", "-o", str(lib), str(tmp_path / "k.c")],
                   check=True)
    script = (f"import ctypes\nk = ctypes.CDLL({str(lib)!r})\nmark = ctypes.CDLL(None).compliance_probe_mark\n"
              "mark(0, 0, 1); k.entry_fn(1); mark(0, 0, 0)\nmark(0, 1, 1); k.other_fn(1); mark(0, 1, 0)\n"
              "import os; print('LD_PRELOAD' in os.environ)\n")
    read, write = os.pipe()
    os.dup2(write, PROBE_FD)
    try:
        out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "LD_PRELOAD": str(probe.path)},
                             pass_fds=(PROBE_FD,), capture_output=True, text=True, check=True)
    finally:
        os.close(PROBE_FD)
        os.close(write)
    records = ProbeRecords()
    while chunk := os.read(read, 65536):
        records.feed(chunk)
    os.close(read)
    assert out.stdout.strip() == "False"  # the interpreter never saw LD_PRELOAD
    symbols = SymbolMap.of(lib, [lib])
    assert entry_problem(records.calls[(0, 0)], ["entry_fn"], symbols, gpu=False) is None
    assert entry_problem(records.calls[(0, 1)], ["entry_fn"], symbols, gpu=False) is not None
    assert ctypes  # the script above uses ctypes in the child


def test_coverage_minimum_from_the_rules() -> None:
    ctx, _ = build_context(HOSTILE_TREE, "training/proposal-custom-kernels")
    minimum = load_ruleset("training/proposal-custom-kernels").verification_coverage["dlrm-embedding"]
    assert minimum["dims"] == [128] and minimum["lookups"] == {"min": 1, "max": 100}
    assert "mlcommons/training" in minimum["provenance"]["documents"][0]["url"]
    by_id = {dk.kernel.id: dk for dk in ctx.kernels()}
    assert missing(by_id["narrow-domain"].kernel.semantics, minimum) == ["dim 128", "bags of 100 lookups"]
    assert missing(by_id["through-shim"].kernel.semantics, minimum) == []


def test_kernel_code_without_a_declared_kernel_does_not_pass() -> None:
    """Class 11 of issue 50: ``compliance verify`` on a tree with a kernel and no manifest exited 0."""
    from compliance.cli.verify import verify_exit_code
    from compliance.engine import report_for
    from compliance.verify import VerifyStage
    from compliance.verify.options import VerifyOptions

    ctx, choice = build_context(FIXTURES / "undeclared", "training/v1.0")
    report = report_for(ctx, choice, [VerifyStage(VerifyOptions(progress=None))])
    assert [f.rule_id for f in report.findings] == ["verify-no-kernel-declared"]
    assert "csrc/bag.cu" in report.findings[0].message
    assert verify_exit_code(report) == 1
