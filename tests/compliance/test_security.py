"""Issue 23: the submission is the adversary (docs/security.md).

Regression tests for the bugs that are not fixture cases (those live in
cases/negative/: PATH_MAX depth, hostile setup.py and manifests, URLs,
commits): unreadable paths, bounded reads and YAML, output to devices and
FIFOs, escaping, and the internal-error exit code.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compliance.blobs import file_blob_hash
from compliance.checks import declarations as kernel_checks
from compliance.checks.upstream_links import parse_repository
from compliance.cli.main import EXIT_INTERNAL, cli
from compliance.engine import run_check
from compliance.errors import InputError
from compliance.inventory import parse_setup
from compliance.report.safetext import one_line, xml_safe
from compliance.upstream.gitcache import askable_path
from compliance.yamlsource import MAX_DEPTH, MAX_NODES, MAX_YAML_BYTES, load_yaml, parse_yaml
from tests.compliance.treeutil import BASE, tree_digest

REPO = Path(__file__).parents[2]
IMPL = "Acme/benchmarks/dlrm/implementations/torch"
SOURCE = f"{IMPL}/kernels/emb.cu"


def _tree(tmp_path: Path) -> Path:
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(BASE, tree, symlinks=True)
    return tree


def _rule_ids(tree: Path) -> set[str]:
    return {f.rule_id for f in run_check(tree).findings}


# --------------------------------------------------------------------------- unreadable paths

def _skip_if_permissions_are_not_enforced(tmp_path: Path) -> None:
    """Root (with CAP_DAC_OVERRIDE) reads mode-000 paths; there the simulated tests stand in."""
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0)
    try:
        os.listdir(probe)
    except PermissionError:
        return
    finally:
        probe.chmod(0o755)
    pytest.skip("permissions are not enforced for this user (root); the simulated test covers it "
                "(run as another user, or as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH)")


def test_mode_000_directory_is_an_error(tmp_path: Path) -> None:
    _skip_if_permissions_are_not_enforced(tmp_path)
    tree = _tree(tmp_path)
    hidden = tree / IMPL / "hidden"
    hidden.mkdir()
    (hidden / "k.cu").write_text("__global__ void k() {}\n")
    hidden.chmod(0)
    try:
        report = run_check(tree)
    finally:
        hidden.chmod(0o755)
    assert any(f.rule_id == "path-unreadable" and f.path == f"{IMPL}/hidden" for f in report.findings)
    assert report.exit_code == 1


def test_unreadable_directory_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root chmod 000 does not stop reads, so opening the directory is made to fail as it would."""
    tree = _tree(tmp_path)
    hidden = tree / IMPL / "hidden"
    hidden.mkdir()
    (hidden / "k.cu").write_text("__global__ void k() {}\n")
    real_open = os.open

    def failing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
        if str(path) == "hidden" and flags & os.O_DIRECTORY:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    report = run_check(tree)
    assert [(f.rule_id, f.path, f.severity.value) for f in report.findings] == [
        ("path-unreadable", f"{IMPL}/hidden", "error")]
    assert report.exit_code == 1


def test_unreadable_declared_source_is_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readable during the walk, unreadable when the kernel check reads it (the old code
    raised PermissionError out of checks/declarations.py)."""
    tree = _tree(tmp_path)
    real_open = builtins.open

    def failing_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith("emb.cu"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(kernel_checks, "open", failing_open, raising=False)
    report = run_check(tree)
    assert [(f.rule_id, f.path) for f in report.findings] == [("path-unreadable", SOURCE)]
    assert "declared source could not be read" in report.findings[0].message


def test_mode_000_declared_source(tmp_path: Path) -> None:
    _skip_if_permissions_are_not_enforced(tmp_path)
    tree = _tree(tmp_path)
    (tree / SOURCE).chmod(0)
    report = run_check(tree)
    assert ("path-unreadable", SOURCE) in {(f.rule_id, f.path) for f in report.findings}


# --------------------------------------------------------------------------- bounded reads

def _sparse(path: Path, size: int, head: bytes = b"") -> None:
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)


def test_huge_sparse_source_is_read_bounded(tmp_path: Path) -> None:
    """A 4 GiB sparse declared source: the old code read it whole (4 GiB of memory). Over the
    walk's 1 GiB limit for one file it is ``path-unscanned`` (an error), with memory bounded."""
    tree = _tree(tmp_path)
    _sparse(tree / SOURCE, 4 << 30, b"__global__ void emb_sum(float* x) {}\n")
    # Peak memory of the checking process itself: VmHWM belongs to the process's own address
    # space, which execve makes anew. (ru_maxrss does not: Linux keeps it across execve, so a
    # child forked from a large pytest process, torch loaded, inherits the parent's peak; it
    # read 337-530 MB in full test runs and 27 MB alone.) torch must stay unloaded as well.
    code = ("import re, sys; from pathlib import Path; from compliance.engine import run_check; "
            "r = run_check(Path(sys.argv[1])); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1); "
            "print(hwm, r.exit_code, 'torch' in sys.modules, sorted({f.rule_id for f in r.findings}))")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=True).stdout
    elapsed = time.monotonic() - started
    peak_kib, exit_code, torch_loaded, rule_ids = out.split(" ", 3)
    assert int(peak_kib) < 300 * 1024 and torch_loaded == "False", out
    assert exit_code == "1" and "path-unscanned" in rule_ids, out
    assert elapsed < 30


def test_blob_hash_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "big.cu"
    _sparse(path, 64 << 20, b"int x;\n")
    data = path.read_bytes()
    expected = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    del data
    tracemalloc.start()
    try:
        assert file_blob_hash(path) == expected
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_upstream_paths_git_cannot_be_asked() -> None:
    assert askable_path("csrc/emb.cu")
    for bad in ("../x", "a/../../x", "", "a\nb", "a\0b"):
        assert not askable_path(bad), bad


# --------------------------------------------------------------------------- YAML limits

@pytest.mark.parametrize(("text", "message", "line"), [
    ("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)),
     f"expands to more than {MAX_NODES} nodes", None),
    ("a: " + "[" * 100_000 + "]" * 100_000, f"nesting deeper than {MAX_DEPTH} levels", 1),
    ("".join("  " * i + "-\n" for i in range(200)), f"nesting deeper than {MAX_DEPTH} levels", MAX_DEPTH + 1),
    ("a: " + "9" * 5000, "integer literal longer than", 1),
    ("a: &a [*a]", "recursive alias", 1),
])
def test_yaml_limits(text: str, message: str, line: int | None) -> None:
    started = time.monotonic()
    with pytest.raises(InputError) as info:
        parse_yaml(text, Path("m.yaml"))
    assert time.monotonic() - started < 2
    assert message in info.value.message
    assert info.value.path == "m.yaml"
    if line is not None:
        assert info.value.line == line
    else:
        assert info.value.line is not None


def test_yaml_size_limit_reads_no_further(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    _sparse(path, 1 << 30)
    with pytest.raises(InputError, match="KiB limit"):
        load_yaml(path)
    path.write_text("a: 1\n" + "#" * (MAX_YAML_BYTES - 10) + "\n")
    assert load_yaml(path).data == {"a": 1}


def test_yaml_aliases_within_limits_still_load() -> None:
    doc = parse_yaml("base: &b {x: 1}\nother: *b\n", Path("m.yaml"))
    assert doc.data == {"base": {"x": 1}, "other": {"x": 1}}


# --------------------------------------------------------------------------- setup.py, URLs

def test_setup_py_parse_failures_are_reported() -> None:
    for text in ("x = a" + ".b" * 10_000, "x = " + "-" * 10_000 + "1", "def (:"):
        extensions, problem = parse_setup(text.encode(), "setup.py")
        assert extensions == [] and problem


def test_repository_parsing() -> None:
    assert parse_repository("https://[::1/acme/x") is None
    assert parse_repository("https://[::1]/acme/x") is not None
    assert parse_repository("https://[::1]/acme/x").host == "::1"  # type: ignore[union-attr]
    assert parse_repository("git@github.com:acme/x\n") is None
    assert parse_repository("https://github.com/acme/x\t") is None


# --------------------------------------------------------------------------- output

def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _device(tmp_path: Path, name: str, minor: int) -> Path:
    """A private copy of /dev/null (minor 3) or /dev/full (minor 7): a broken ``--output``
    replaces the device it is given with a regular file, so the tests never give it the
    real ones."""
    node = tmp_path / name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    return node


def test_output_to_a_device_keeps_the_device(tmp_path: Path) -> None:
    null = _device(tmp_path, "null", 3)
    result = _invoke("check", str(_tree(tmp_path)), "--output", str(null))
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat(null).st_mode)


def test_output_to_a_full_device_is_an_input_error(tmp_path: Path) -> None:
    full = _device(tmp_path, "full", 7)
    result = _invoke("check", str(_tree(tmp_path)), "--output", str(full))
    assert result.exit_code == 2
    assert f"{full}: cannot write the report: No space left on device" in result.stderr
    assert "Traceback" not in result.output and stat.S_ISCHR(os.stat(full).st_mode)


def test_output_to_fifo_writes_into_it(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    result = _invoke("check", str(tree), "--output", str(fifo), "--format", "json")
    out, _ = reader.communicate(timeout=30)
    assert result.exit_code == 0, result.output
    assert json.loads(out)["summary"]["passed"] is True
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_output_to_dev_stdout(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "compliance", "check", str(tree), "--output", "/dev/stdout"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("PASS")


def test_report_file_mode_follows_umask(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    old = os.umask(0o022)
    try:
        assert _invoke("check", str(tree), "--output", str(tmp_path / "r.txt")).exit_code == 0
        (tmp_path / "kept.txt").write_text("")
        (tmp_path / "kept.txt").chmod(0o640)
        assert _invoke("check", str(tree), "--output", str(tmp_path / "kept.txt")).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "kept.txt").stat().st_mode) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture()
def hostile_names(tmp_path: Path) -> Path:
    """A tree with an undecodable, control-character file name and a lone surrogate in a manifest."""
    tree = _tree(tmp_path)
    folder = os.fsencode(tree / IMPL) + b"/k\xff\x1b[31m"
    os.mkdir(folder)
    with open(folder + b"/x\n  PASS.cu", "w") as handle:
        handle.write("__global__ void f() {}\n")
    with open(os.fsencode(tree / IMPL) + "/ok\u202eucx.\u2028\u2066n.cu".encode(), "w") as handle:
        handle.write("__global__ void g() {}\n")  # U+202E shows "ok" + "n.cu" ... reversed; U+2028 breaks a line
    manifest = tree / IMPL / "kernel_manifest.yaml"
    manifest.write_text(manifest.read_text().replace("category: dlrm-embedding", 'category: "x\\ud800"'))
    return tree


@pytest.mark.parametrize("fmt", ["text", "json", "junit", "sarif"])
def test_hostile_names_in_every_reporter(hostile_names: Path, tmp_path: Path, fmt: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8:strict"}
    before = tree_digest(hostile_names)
    proc = subprocess.run([sys.executable, "-m", "compliance", "check", str(hostile_names), "--format", fmt],
                          capture_output=True, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    text = proc.stdout.decode("utf-8")  # strict: valid UTF-8
    assert "Traceback" not in proc.stderr.decode()
    out = tmp_path / f"report.{fmt}"
    assert _invoke("check", str(hostile_names), "--format", fmt, "--output", str(out)).exit_code == 1
    assert not set(text + out.read_bytes().decode("utf-8")) & {"\u202e", "\u2028", "\u2066"}
    if fmt == "text":
        assert "k\\udcff\\x1b[31m/x\\x0a  PASS.cu" in text
        assert "ok\\u202eucx.\\u2028\\u2066n.cu" in text  # issue 50 class 13: shown escaped, never raw
        assert not any(line.startswith("  PASS") for line in text.splitlines())
    if fmt == "junit":
        import xml.etree.ElementTree as ET

        ET.fromstring(text.split("\n", 1)[1])
    if fmt in ("json", "sarif"):
        json.loads(text)
    assert tree_digest(hostile_names) == before


def test_rules_show_with_a_lone_surrogate(tmp_path: Path) -> None:
    rules = (REPO / "rules/training/v0.7.yaml").read_text()
    bad = tmp_path / "r.yaml"
    bad.write_text("\n".join('title: "bad \\ud800"' if line.startswith("title:") else line
                             for line in rules.splitlines()) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8:strict"}
    for fmt in ("text", "json"):
        proc = subprocess.run([sys.executable, "-m", "compliance", "rules", "show", str(bad), "--format", fmt],
                              capture_output=True, env=env, timeout=60)
        assert proc.returncode in (0, 2), proc.stderr
        assert b"Traceback" not in proc.stderr
        proc.stdout.decode("utf-8")


def test_safe_text_helpers() -> None:
    assert one_line("a\nb\x1b\ud800") == "a\\x0ab\\x1b\\ud800"
    assert one_line("x\u202ey\u2028z\u2029\u061c\u200e\u200f\u2066\u2069\ufeff") == \
        "x\\u202ey\\u2028z\\u2029\\u061c\\u200e\\u200f\\u2066\\u2069\\ufeff"
    assert xml_safe("a\u202eb\n") == "a\\u202eb\n"
    assert xml_safe("a\x01\nb\udcff") == "a\\x01\nb\\udcff"


# --------------------------------------------------------------------------- internal errors

def test_internal_error_exits_3_naming_the_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import compliance.cli.check as check_module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(check_module, "run_check", broken)
    tree = _tree(tmp_path)
    result = _invoke("check", str(tree))
    assert result.exit_code == EXIT_INTERNAL == 3
    assert f"internal error while processing {tree}: TypeError: unhashable type" in result.stderr
    assert "Traceback" not in result.output


def test_hostile_names_in_the_inventory(hostile_names: Path) -> None:
    result = _invoke("inventory", str(hostile_names))
    assert result.exit_code == 0, result.output
    assert "k\\udcff\\x1b[31m/x\\x0a  PASS.cu:1 (cuda)" in result.stdout
    assert not any(line.startswith("  PASS") for line in result.stdout.splitlines())


def test_alias_bomb_rule_file_on_every_command(tmp_path: Path) -> None:
    """--rules, rules validate and rules show each hung on this file before issue 23."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)))
    started = time.monotonic()
    validate = _invoke("rules", "validate", str(bomb))
    show = _invoke("rules", "show", str(bomb))
    check = _invoke("check", str(_tree(tmp_path)), "--rules", str(bomb))
    assert time.monotonic() - started < 10
    assert validate.exit_code == 1 and "expands to more than" in validate.stdout
    assert show.exit_code == 2 and f"{bomb}:" in show.stderr
    assert check.exit_code == 2
    assert "Traceback" not in validate.output + show.output + check.output


@pytest.mark.parametrize("case", ["manifest-vendored-malformed", "manifest-kernel-id-list", "manifest-kernels-null"])
def test_malformed_manifests_in_verify(tmp_path: Path, case: str) -> None:
    """``verify`` ran manifest semantics on schema-invalid data too (TypeError) before issue 23."""
    from tests.compliance.treeutil import CASES, build_case

    build_case(CASES / "negative" / case, tmp_path / "t")
    result = _invoke("verify", str(tmp_path / "t"), "--quiet")
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("case", ["setup-py-unparseable-recursion", "setup-py-unparseable-memory"])
def test_hostile_setup_py_in_inventory(tmp_path: Path, case: str) -> None:
    from tests.compliance.treeutil import CASES, build_case

    build_case(CASES / "negative" / case, tmp_path / "t")
    result = _invoke("inventory", str(tmp_path / "t"))
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_stdout_closed_by_its_reader_exits_141_without_an_internal_error() -> None:
    """``compliance … | head``: the reader has gone before the report is written. The old code
    reported that as an internal error (exit 3) naming a BrokenPipeError."""
    proc = subprocess.Popen([sys.executable, "-m", "compliance", "vendored", "catalogue"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # long before the interpreter has started: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "internal error" not in err and "Traceback" not in err, err
