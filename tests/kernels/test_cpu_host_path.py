"""The compiled host path without a GPU: its setting, the argument layout it is given (the
Python packers' own, read by probing), and the library itself: it builds against the installed
torch, loads, and leaves every call it must not serve to the Python path (here: every call, the
tensors being on the CPU). Launches through it are tested on the GPU (test_gpu_host_path.py)."""

from __future__ import annotations

import ctypes
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reference_kernels import _host, _launch, _ops  # noqa: E402


class _Tensor:
    """A stand-in with a pointer and a size, as the packers read them."""

    def __init__(self, pointer: int, size: int) -> None:
        self.pointer, self.size = pointer, size

    def data_ptr(self) -> int:
        return self.pointer

    def numel(self) -> int:
        return self.size


def _evaluate(sources: tuple[tuple[int, object], ...], values: dict[str, int]) -> tuple[object, ...]:
    return tuple(constant if source == 0 else values[_host.SOURCES[source]] for source, constant in sources)


@pytest.mark.parametrize("setting", ["auto", "wait", "off", " WAIT "])
def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.setenv(_host.ENV, setting)
    assert _host.setting() == setting.strip().lower()


def test_an_unknown_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_host.ENV, "fast")
    with pytest.raises(ValueError, match="REFERENCE_KERNELS_HOST_PATH='fast' is not one of auto, wait, off"):
        _host.setting()


def test_the_argument_sources_reproduce_every_forward_packer() -> None:
    """Over a spread of the golden table's calls (every forward entry), the sources read off a
    packer by probing give that packer's arguments for other values, with and without the
    optional tensors: what the library packs is what the Python path packs."""
    from tests.kernels import golden_picks

    prepared: list[Any] = []
    plain_prepared = _launch._prepared

    def recorded(key: tuple[Any, ...], *args: Any) -> Any:
        found = plain_prepared(key, *args)
        if found is not None and len(key) == len(_launch.BagKey._fields):
            prepared.append(found)
        return found

    with golden_picks.recording(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(_launch, "_prepared", recorded)
        for combo in list(golden_picks.combinations())[::53]:
            golden_picks.picks_of(combo)
    _launch.clear_plans()
    entries = set()
    for plan, _fn, _grid, signature, pack in prepared:
        sources = _host.argument_sources(pack)
        assert len(sources) == len(signature.kinds)
        entries.add(plan.entry)
        for present in (True, False):
            values = {"weight": 0x1000, "indices": 0x2000, "offsets": 0x3000 if present else 0,
                      "offsets_numel": 4097 if present else 0, "per_sample_weights": 0x4000 if present else 0,
                      "padding": 7, "out": 0x5000, "argmax": 0, "table_rows": 0, "lock": 11, "record": 12,
                      "flag": 13, "token": 14, "op": 1, "num_rows": 15}
            expected = pack(values["weight"], _Tensor(values["indices"], 99),
                            _Tensor(values["offsets"], values["offsets_numel"]) if present else None,
                            _Tensor(values["per_sample_weights"], 99) if present else None, values["padding"],
                            None, values["out"], None, tuple(values[k] for k in ("lock", "record", "flag", "token",
                                                                                  "op", "num_rows")))
            assert _evaluate(sources, values) == tuple(expected), plan.entry
    assert entries == set(_launch.FORWARD_KINDS), entries


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The library, built from the shipped source against this torch (once per module)."""
    path = tmp_path_factory.mktemp("host") / ("lib" + Path(_host.library_path()).suffix)
    try:
        _host.build(path)
    except _host.HostPathError as exc:
        if "no C++ compiler" in str(exc):
            pytest.skip(str(exc))
        raise
    return _host.load_library(path)


# A stand-in for cuLaunchKernel: counts calls (none may happen here).
_LAUNCHES: list[int] = []
_LAUNCH_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3))
_FAKE_LAUNCH = _LAUNCH_TYPE(lambda *args: _LAUNCHES.append(1) or 0)


def _bind_on_cpu(library: Any) -> None:
    from reference_kernels import index_check, tuning

    library.init(ctypes.cast(_FAKE_LAUNCH, ctypes.c_void_p).value, lambda: 0, lambda index: 0,
                 index_check.default_mode, index_check._TOKENS, tuning, _host.raise_launch_error, _launch,
                 lambda: False, _ops.host_path_backward)


def test_the_library_builds_loads_and_leaves_cpu_calls_to_python(library: Any) -> None:
    weight = torch.randn(10, 4)
    indices = torch.tensor([1, 2, 3, 4], dtype=torch.int64)
    offsets = torch.tensor([0, 2], dtype=torch.int64)
    arguments = (indices, weight, offsets, None, False, "sum", False, None, False, None, None)
    assert library.bag(*arguments) is None  # not bound yet
    _bind_on_cpu(library)
    assert library.bag(*arguments) is None  # CPU tensors
    assert library.pending() is False
    assert _LAUNCHES == []
    with pytest.raises(TypeError, match="11 positional arguments"):
        library.bag(indices, weight)


def test_offer_rejects_what_it_cannot_register(library: Any) -> None:
    _bind_on_cpu(library)
    library.clear()
    key = (torch.float32, 100, 128, 0, True, torch.int64, 0, 2048, 64, 1, False, "sum", False, False, False, False)
    with pytest.raises(TypeError, match="BagKey's 16 fields"):
        library.offer(key[:-1], 0, 1, 1, 256, "P", ((1, 0),))
    with pytest.raises(ValueError, match="one slot per parameter kind"):
        library.offer(key, 0, 1, 1, 256, "PP", ((1, 0),))
    with pytest.raises(ValueError, match="source is out of range"):
        library.offer(key, 0, 1, 1, 256, "P", ((len(_host.SOURCES), 0),))
    assert library.offer(key, 0, 1, 1, 256, "Pqi", ((1, 0), (0, 5), (0, 6))) is True
    batched = key[:9] + (4, True) + key[11:]
    assert library.offer(batched, 0, 1, 1, 256, "P", ((1, 0),)) is False  # the table-batched path stays Python's
    assert library.plan_count() == 1
    library.clear()
    assert library.plan_count() == 0


def test_a_failed_build_warns_once_and_leaves_the_python_path(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv(_host.ENV, "wait")
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("REFERENCE_KERNELS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_host, "_STATE", {"state": "not started", "library": "", "reason": ""})
    with pytest.warns(RuntimeWarning, match="compiled host path could not be built"):
        _host.start()
    status = _host.status()
    assert status.state == "failed" and "no C++ compiler" in status.reason
    assert _host.LOADED == []
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        _host.start()  # once per process: no second attempt, no second warning
    assert again == []
    assert not list((tmp_path / "cache").glob("**/*.so"))
