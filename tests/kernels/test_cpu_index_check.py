"""The index check's modes without a GPU: argument and environment resolution, the messages a
ledger record turns into, the checked copy's dtype, and the public surface (docs/kernels.md,
"Index range check")."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference_kernels as rk
from reference_kernels import index_check as ic

ENVS = (ic.MODE_ENV, ic.SKIP_ENV)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_modes_are_the_public_ones() -> None:
    assert ic.MODES == rk.INDEX_CHECK_MODES == ("deferred", "warn", "sync", "ignore")


@pytest.mark.parametrize("given_value,mode", [(True, "sync"), (False, "ignore"), (None, "deferred"),
                                              ("deferred", "deferred"), ("warn", "warn"), ("sync", "sync"),
                                              ("ignore", "ignore")])
def test_every_accepted_spelling(given_value: object, mode: str, clean_env: pytest.MonkeyPatch) -> None:
    """Each spelling resolves once to its CheckMode member (the one value every later step reads)."""
    assert ic.resolve_mode(given_value) is rk.CheckMode(mode)


def test_a_check_mode_is_its_name_wherever_a_name_goes(clean_env: pytest.MonkeyPatch) -> None:
    """CheckMode members are accepted as check_indices, and read as their names in messages, dict
    keys (the ledger's regions) and the compiled host path's string compare."""
    for mode in rk.CheckMode:
        assert ic.resolve_mode(mode) is mode
        assert str(mode) == f"{mode}" == mode.value == mode and hash(mode) == hash(mode.value)
        assert isinstance(mode, str)
    assert {name: 1 for name in ic.REGIONS}[rk.CheckMode.WARN] == 1
    clean_env.setenv(ic.MODE_ENV, "Warn")
    assert ic.default_mode() is rk.CheckMode.WARN


@pytest.mark.parametrize("bad", ["", "fatal", "Deferred", "SYNC", " warn", "true", "1", "none"])
def test_invalid_strings_name_the_valid_modes(bad: str) -> None:
    with pytest.raises(ValueError, match="check_indices must be one of") as err:
        ic.resolve_mode(bad)
    for mode in ic.MODES:
        assert f"'{mode}'" in str(err.value)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", [1, 0, 1.0, b"sync", ["sync"], object()])
def test_invalid_types_are_rejected(bad: object) -> None:
    with pytest.raises(TypeError, match="check_indices must be one of .*'deferred'.*'ignore'") as err:
        ic.resolve_mode(bad)
    assert type(bad).__name__ in str(err.value)


@given(st.text(max_size=12))
def test_any_other_string_is_rejected(text: str) -> None:
    if text in ic.MODES:
        assert ic.resolve_mode(text) == text
    else:
        with pytest.raises(ValueError, match="check_indices must be one of"):
            ic.resolve_mode(text)


@pytest.mark.parametrize("value,mode", [("deferred", "deferred"), ("warn", "warn"), ("sync", "sync"),
                                        ("ignore", "ignore"), (" WARN\n", "warn"), ("Sync", "sync")])
def test_environment_sets_the_default(value: str, mode: str, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ic.MODE_ENV, value)
    assert ic.resolve_mode(None) == mode
    assert ic.resolve_mode("sync") == "sync"  # an explicit argument wins


def test_invalid_environment_value_names_the_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ic.MODE_ENV, "fatal")
    with pytest.raises(ValueError, match=re.escape("REFERENCE_KERNELS_INDEX_CHECK='fatal'")) as err:
        ic.resolve_mode(None)
    assert "deferred, warn, sync, ignore" in str(err.value)
    assert ic.resolve_mode(False) == "ignore"  # only calls that ask for the default read it


def test_legacy_skip_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ic.SKIP_ENV, "1")
    assert ic.resolve_mode(None) == "ignore"
    clean_env.setenv(ic.SKIP_ENV, "0")
    assert ic.resolve_mode(None) == "deferred"
    clean_env.setenv(ic.SKIP_ENV, "1")
    clean_env.setenv(ic.MODE_ENV, "warn")  # the new variable wins
    assert ic.resolve_mode(None) == "warn"
    clean_env.setenv(ic.MODE_ENV, "")  # empty: unset
    assert ic.resolve_mode(None) == "ignore"
    # the fast reader sees what os.environ holds
    assert ic._read_environment() == ("", "1") == (os.environ.get(ic.MODE_ENV), os.environ.get(ic.SKIP_ENV))
    clean_env.delenv(ic.MODE_ENV)
    assert ic._read_environment() == (None, "1")


def _cpu_calls() -> list[tuple[str, object]]:
    torch = pytest.importorskip("torch")
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 2], [3, 4]])
    bag, emb, tbe = rk.EmbeddingBag(10, 4), rk.Embedding(10, 4), TableBatchedEmbeddingBag([5, 7], 4)
    flat, offsets = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2, 3, 3])

    def module_call(module: torch.nn.Module, *args: object) -> object:
        return lambda value: (setattr(module, "check_indices", value), module(*args))

    return [("embedding_bag", lambda value: rk.embedding_bag(idx, w, check_indices=value)),
            ("embedding", lambda value: rk.embedding(idx, w, check_indices=value)),
            ("EmbeddingBag", module_call(bag, idx)), ("Embedding", module_call(emb, idx)),
            ("TableBatchedEmbeddingBag", module_call(tbe, flat, offsets))]


@pytest.mark.parametrize("entry", range(5))
def test_entry_points_validate_check_indices_before_the_device(entry: int, clean_env: pytest.MonkeyPatch) -> None:
    """Every function and module (attribute ``check_indices``) rejects a bad mode on a CPU with
    the mode's message, and accepts each good spelling (then fails only for want of CUDA)."""
    name, call = _cpu_calls()[entry]
    with pytest.raises(ValueError, match="check_indices must be one of"):
        call("fatal")  # type: ignore[operator]
    with pytest.raises(TypeError, match="check_indices must be one of"):
        call(1)  # type: ignore[operator]
    clean_env.setenv(ic.MODE_ENV, "bogus")
    with pytest.raises(ValueError, match=ic.MODE_ENV):
        call(None)  # type: ignore[operator]
    clean_env.delenv(ic.MODE_ENV)
    if name == "TableBatchedEmbeddingBag":
        return  # its CPU failure comes from the launch, not from a check of its own
    for value in (None, True, False, *ic.MODES):
        with pytest.raises(RuntimeError, match="needs CUDA tensors"):
            call(value)  # type: ignore[operator]


def test_modules_fix_their_mode_at_construction(clean_env: pytest.MonkeyPatch) -> None:
    """The constructor's check_indices is resolved once: None takes the environment's default then,
    and a later change of the environment does not change a module's mode; an assignment resolves
    too (the attribute is always a CheckMode, never a spelling to resolve per call)."""
    pytest.importorskip("torch")
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    clean_env.setenv(ic.MODE_ENV, "warn")
    modules = [rk.EmbeddingBag(3, 2), rk.Embedding(3, 2), TableBatchedEmbeddingBag([3, 4], 2)]
    clean_env.setenv(ic.MODE_ENV, "sync")
    assert [m.check_indices for m in modules] == [rk.CheckMode.WARN] * 3
    modules[0].check_indices = True
    assert modules[0].check_indices is rk.CheckMode.SYNC and modules[0]._check_mode is rk.CheckMode.SYNC


def test_modules_default_to_the_environment() -> None:
    pytest.importorskip("torch")  # the modules are torch.nn.Modules (the kernels extra)
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    for make in (lambda **kw: rk.EmbeddingBag(3, 2, **kw), lambda **kw: rk.Embedding(3, 2, **kw),
                 lambda **kw: TableBatchedEmbeddingBag([3, 4], 2, **kw)):
        assert make().check_indices is rk.CheckMode.DEFERRED
        assert make(check_indices=False).check_indices is rk.CheckMode.IGNORE
        assert make(check_indices="warn").check_indices is rk.CheckMode.WARN
        with pytest.raises(ValueError, match="check_indices must be one of"):
            make(check_indices="fatal")  # at construction, not at the first forward
    with pytest.raises(ValueError, match="at least one row"):
        TableBatchedEmbeddingBag([3, 0], 2)


def _record(**fields: int) -> list[int]:
    words = [0] * ic.RECORD_WORDS
    for name, value in fields.items():
        words[getattr(ic, f"RECORD_{name.upper()}")] = value
    return words


def test_clean_record_has_no_finding() -> None:
    assert ic.parse_record([0] * ic.RECORD_WORDS) is None


def test_error_message_names_op_position_value_and_range() -> None:
    finding = ic.parse_record(_record(owner=7, op=1, pos=18, value=100, table=-1, rows=100, indices=40, count=1))
    assert finding is not None
    assert ic.error_message(finding) == ("reference_kernels.embedding_bag: index 100 at position 17 is out of "
                                         "range for an embedding table of 100 rows (valid: 0..99)")
    finding = ic.parse_record(_record(owner=3, op=3, pos=1, value=-5, table=2, rows=7, bag=4, indices=9, count=4,
                                      bag_count=2))
    assert finding is not None
    message = ic.error_message(finding)
    assert message.startswith("reference_kernels.TableBatchedEmbeddingBag: index -5 at position 0 is out of range "
                              "for table 2 of 7 rows (valid: 0..6); offsets are invalid at bag 3: offsets must "
                              "start at 0 (offsets[0] == 0, as torch.nn.functional.embedding_bag requires), be "
                              "non-decreasing and lie in [0, 9]")
    assert message.endswith("(4 more bad indices or bags since the last check)")


def test_offsets_only_and_warning_messages() -> None:
    finding = ic.parse_record(_record(owner=1, op=2, bag=2, indices=10, bag_count=1))
    assert finding is not None and finding.position is None
    assert ic.error_message(finding) == ("reference_kernels.embedding: offsets are invalid at bag 1: offsets must "
                                         "start at 0 (offsets[0] == 0, as torch.nn.functional.embedding_bag "
                                         "requires), be non-decreasing and lie in [0, 10] (the number of indices)")
    finding = ic.parse_record(_record(owner=1, op=1, pos=4, value=12, table=-1, rows=10, indices=10, count=3))
    assert finding is not None
    assert ic.warning_message(finding) == (
        "reference_kernels: 3 out-of-range indices were read as row 0 of their table since the last report "
        "(check_indices='warn'); the first, in embedding_bag: index 12 at position 3 is out of range for an "
        "embedding table of 10 rows (valid: 0..9)")


def test_checked_copy_dtype_and_table_caps() -> None:
    torch = pytest.importorskip("torch")
    assert ic.clean_dtype(10, 100, torch.int64) == torch.int32
    assert ic.clean_dtype(2**31 - 1, 2**31, torch.int64) == torch.int32  # rows 0 .. 2^31 - 1 fit
    assert ic.clean_dtype(2**31, 10, torch.int64) == torch.int64  # offsets up to 2^31 do not
    assert ic.clean_dtype(10, 2**31 + 1, torch.int64) == torch.int64
    assert [ic.table_cap(t) for t in (1, 63, 64, 511, 4095, 4096)] == [64, 64, 512, 512, 4096, -1]


def test_check_index_errors_without_cuda_is_clean() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only answer")
    assert rk.check_index_errors() is None
    assert issubclass(rk.EmbeddingIndexWarning, UserWarning)
    assert issubclass(rk.EmbeddingIndexError, IndexError)


def test_resolution_imports_no_torch() -> None:
    code = ("import sys, reference_kernels.index_check as ic; ic.resolve_mode('warn'); ic.resolve_mode(None); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
