"""The compiled host path without a GPU: its setting, the argument layout it is given (the
Python packers' own, read by probing), and the library itself: it builds against the installed
torch, loads, and leaves every call it must not serve to the Python path (here: every call, the
tensors being on the CPU). Launches through it are tested on the GPU (test_gpu_host_path.py)."""

from __future__ import annotations

import ctypes
import struct
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reference_kernels import host, launch, ops  # noqa: E402
from reference_kernels.errors import CheckMode  # noqa: E402
from reference_kernels.index_check import resolve_mode  # noqa: E402

_Tensor = host._Probe  # a stand-in with a pointer and a size, as the packers read them


def _evaluate(sources: tuple[tuple[int, object], ...], values: dict[str, int]) -> tuple[object, ...]:
    return tuple(constant if source == 0 else values[host.SOURCES[source]] for source, constant in sources)


@pytest.mark.parametrize("setting", ["auto", "wait", "off", " WAIT "])
def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.setenv(host.ENV, setting)
    assert host.setting() == setting.strip().lower()


def test_an_unknown_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(host.ENV, "fast")
    with pytest.raises(ValueError, match="REFERENCE_KERNELS_HOST_PATH='fast' is not one of auto, wait, off"):
        host.setting()


def test_programmatic_launches_need_the_setting_and_sm90_on_every_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuLaunchKernelEx's address only where every visible GPU compiles the kernels' wait
    (griddepcontrol, sm_90 on) and the setting is not ``off``; an unknown value names the variable."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    capabilities = {0: (9, 0), 1: (8, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: capabilities[d])
    monkeypatch.delenv(host.PROGRAMMATIC_ENV, raising=False)
    assert host.programmatic_setting() == "auto"
    assert host.launch_ex_address() == 0  # an sm_80 beside the sm_90
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert host.launch_ex_address() == 0  # no GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: type("Driver", (), {})())  # a driver without the entry
    assert host.launch_ex_address() == 0
    monkeypatch.setenv(host.PROGRAMMATIC_ENV, "off")
    assert host.launch_ex_address() == 0
    monkeypatch.setenv(host.PROGRAMMATIC_ENV, "on")
    with pytest.raises(ValueError, match="REFERENCE_KERNELS_PROGRAMMATIC_LAUNCH='on' is not one of auto, off"):
        host.launch_ex_address()


def test_the_argument_sources_reproduce_every_forward_packer() -> None:
    """Over a spread of the golden table's calls (every forward entry), the sources read off a
    packer by probing give that packer's arguments for other values, with and without the
    optional tensors: what the library packs is what the Python path packs."""
    from tests.kernels import golden_picks

    prepared: list[Any] = []
    plain_prepared = launch._prepared

    def recorded(key: tuple[Any, ...], *args: Any) -> Any:
        found = plain_prepared(key, *args)
        if found is not None and len(key) == len(launch.BagKey._fields):
            prepared.append(found)
        return found

    with golden_picks.recording(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch, "_prepared", recorded)
        for combo in list(golden_picks.combinations())[::53]:
            golden_picks.picks_of(combo)
    launch.clear_plans()
    entries = set()
    for plan, _fn, _grid, signature, pack in prepared:
        sources = host.argument_sources(pack)
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
    assert entries == set(launch.FORWARD_KINDS), entries


# Tests that build the compiled host path (host_path.cpp against torch: about 30 s on two cores, once per
# run) belong to the slow set, which .ci/run runs as its own step.
SLOW_BUILD = pytest.mark.slow


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The library, built from the shipped source against this torch (once per module)."""
    path = tmp_path_factory.mktemp("host") / ("lib" + Path(host.library_path()).suffix)
    try:
        host.build(path)
    except host.HostPathError as exc:
        if "no C++ compiler" in str(exc):
            pytest.skip(str(exc))
        raise
    return host.load_library(path)


# A stand-in for cuLaunchKernel: counts calls (none may happen here).
_LAUNCHES: list[int] = []
_LAUNCH_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3))
_FAKE_LAUNCH = _LAUNCH_TYPE(lambda *args: _LAUNCHES.append(1) or 0)


def _bind_on_cpu(library: Any) -> None:
    from reference_kernels import index_check, tbe, tuning

    library.init(ctypes.cast(_FAKE_LAUNCH, ctypes.c_void_p).value, lambda: 0, lambda index: 0,
                 index_check.HOST_MODES, index_check._TOKENS, tuning, host.raise_launch_error, launch,
                 lambda: False, ops.host_path_backward, tbe.host_path_backward, tbe.host_path_update)


@SLOW_BUILD
def test_the_library_builds_loads_and_leaves_cpu_calls_to_python(library: Any) -> None:
    weight = torch.randn(10, 4)
    indices = torch.tensor([1, 2, 3, 4], dtype=torch.int64)
    offsets = torch.tensor([0, 2], dtype=torch.int64)
    arguments = (indices, weight, offsets, None, False, "sum", False, None, False, None, CheckMode.DEFERRED)
    assert library.bag(*arguments) is None  # not bound yet
    _bind_on_cpu(library)
    assert library.bag(*arguments) is None  # CPU tensors
    assert library.pending() is False
    assert _LAUNCHES == []
    with pytest.raises(TypeError, match="11 positional arguments"):
        library.bag(indices, weight)


@SLOW_BUILD
def test_offer_rejects_what_it_cannot_register(library: Any) -> None:
    _bind_on_cpu(library)
    library.clear()
    key = (torch.float32, 100, 128, 0, True, torch.int64, 0, 2048, 64, 1, False, "sum", False, False, False, False)
    with pytest.raises(TypeError, match="BagKey's 16 fields"):
        library.offer(key[:-1], 0, 1, 1, 256, "P", ((1, 0),))
    with pytest.raises(ValueError, match="one slot per parameter kind"):
        library.offer(key, 0, 1, 1, 256, "PP", ((1, 0),))
    with pytest.raises(ValueError, match="source is out of range"):
        library.offer(key, 0, 1, 1, 256, "P", ((len(host.SOURCES), 0),))
    assert library.offer(key, 0, 1, 1, 256, "Pqi", ((1, 0), (0, 5), (0, 6))) is True
    batched = key[:9] + (4, True) + key[11:]
    assert library.offer(batched, 0, 1, 1, 256, "P", ((1, 0),)) is True  # a table-batched call's: its own key
    assert library.offer(key[:11] + ("median",) + key[12:], 0, 1, 1, 256, "P", ((1, 0),)) is False
    assert library.plan_count() == 2
    with pytest.raises(ValueError, match="table cap must be 0 or one of"):
        library.offer_check(0, torch.int64, torch.int32, 1, 256, 1056, 100)
    library.clear()
    assert library.plan_count() == 0


def test_a_failed_build_warns_once_and_leaves_the_python_path(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv(host.ENV, "wait")
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("REFERENCE_KERNELS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(host, "_STATE", {"state": "not started", "library": "", "reason": ""})
    with pytest.warns(RuntimeWarning, match="compiled host path could not be built"):
        host.start()
    status = host.status()
    assert status.state == "failed" and "no C++ compiler" in status.reason
    assert host.LOADED == []
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        host.start()  # once per process: no second attempt, no second warning
    assert again == []
    assert not list((tmp_path / "cache").glob("**/*.so"))


# ---------------------------------------------------------------------------------------------
# The library's whole path without a GPU: CPU tensors as device 0 (cpu_as_device0), a launcher
# that records each launch's function, grid, block and parameter bytes, plans made by plan for a
# described device and registered as the Python path registers them.

_RECORDED: list[tuple[int, int, int, bytes]] = []


def _record_launch(function: int, grid: int, _gy: int, _gz: int, block: int, _by: int, _bz: int, _smem: int,
                   _stream: int, _params: int, extra: Any) -> int:
    buffer, size = extra[1], ctypes.cast(extra[3], ctypes.POINTER(ctypes.c_size_t))[0]
    _RECORDED.append((function, grid, block, ctypes.string_at(buffer, size)))
    return 0


_RECORD_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))(_record_launch)
_BACKWARD_CALLS: list[tuple[Any, ...]] = []
_FLAGS = (ctypes.c_int64 * 64)()  # the host flag words (all clear unless a test sets one)
LEDGERS = {"deferred": (11, 12, 13), "warn": (21, 22, 23)}  # stand-in lock, record and flag pointers


def _fake_backward(grad_out: Any, weight: Any, indices: Any, offsets: Any, psw: Any, argmax: Any, mode: str,
                   padding_idx: int, last: bool, num_weights: int, psw_needs_grad: bool) -> tuple[Any, Any]:
    _BACKWARD_CALLS.append((grad_out, weight, indices, offsets, psw, argmax, mode, padding_idx, last, num_weights,
                            psw_needs_grad))
    return torch.full((num_weights, grad_out.shape[1]), 7.0), None


def _fake_tbe_backward(grad_out: Any, table_rows: Any, indices: Any, offsets: Any, psw: Any, mode: str,
                       num_weights: int) -> tuple[Any]:
    _BACKWARD_CALLS.append((grad_out, table_rows, indices, offsets, psw, mode, num_weights))
    return (torch.full((num_weights, grad_out.shape[1] // table_rows.numel()), 5.0),)


def _fake_tbe_update(grad_out: Any, weight: Any, table_rows: Any, indices: Any, offsets: Any, psw: Any, mode: str,
                     update: Any) -> tuple[Any]:
    _BACKWARD_CALLS.append((grad_out, weight, table_rows, indices, offsets, psw, mode, update))
    return (None,) if update is not True else (torch.full_like(weight, 3.0),)


def _loaded(library: Any) -> host.HostPath:
    """``library`` as host.LOADED holds it once published (outside torch.compile)."""
    return host.HostPath(bag=getattr(library, "bag", None), is_compiling=lambda: False, library=library,
                         tbe=getattr(library, "tbe", None))


@pytest.fixture
def on_cpu(library: Any) -> Any:
    """The library bound to the recording launcher, CPU tensors as device 0; unbound after."""
    from reference_kernels import index_check, tuning

    library.init(ctypes.cast(_RECORD_LAUNCH, ctypes.c_void_p).value, lambda: 0, lambda index: 0,
                 index_check.HOST_MODES, index_check._TOKENS, tuning, host.raise_launch_error, launch,
                 lambda: False, _fake_backward, _fake_tbe_backward, _fake_tbe_update)
    library.cpu_as_device0(True)
    library.set_ledger(0, ctypes.addressof(_FLAGS), LEDGERS["deferred"], LEDGERS["warn"])
    library.clear()
    _RECORDED.clear()
    _BACKWARD_CALLS.clear()
    yield library
    library.cpu_as_device0(False)
    library.set_ledger(0, 0, (0, 0, 0), (0, 0, 0))
    library.clear()


def _key(weight: Any, indices: Any, offsets: Any, mode: str, psw: Any, pad: int, checked: bool,
         need_argmax: bool = False) -> tuple[Any, ...]:
    """The Python path's BagKey of a one-table call (the output's alignment taken as 16 bytes)."""
    num_bags = indices.shape[0] if offsets is None else offsets.numel()
    return (weight.dtype, weight.shape[0], weight.shape[1], weight.data_ptr() % 16, True, indices.dtype,
            indices.shape[1] if offsets is None else 0, indices.numel(), num_bags, 1, False, mode, psw is not None,
            need_argmax, pad >= 0, checked)


def _register(library: Any, key: tuple[Any, ...], select: Any = None) -> tuple[Any, Any]:
    """Plan the call of ``key`` for the described device and register it as the Python path does."""
    from reference_kernels import tuning
    from reference_kernels.plan import plan_bag_forward
    from tests.kernels.golden_picks import DEVICE

    call = launch._bag_call(key)
    plan = (select or plan_bag_forward)(call, DEVICE, tuning.current())
    if plan is None:
        library.offer(key, 0, 0, 0, 0, "", ())
        return None, None
    pack = launch._forward_packer(plan, call)
    library.offer(key, 0, 0xF00D, _grid(plan), plan.block, launch.FORWARD_KINDS[plan.entry],
                  host.argument_sources(pack))
    return plan, pack


def _grid(plan: Any) -> int:
    """The plan's grid as launch._prepared makes it (resident blocks: the variant's floor here)."""
    from tests.kernels.golden_picks import DEVICE

    resident = dict(plan.defines).get("MIN_BLOCKS", 0) if plan.resident_waves is not None else 0
    return int(plan.grid(DEVICE.sms, resident))


def _csr(n_bags: int, length: int, rows: int, dtype: Any = torch.int64) -> tuple[Any, Any]:
    idx = torch.randint(0, rows, (n_bags * length,), dtype=dtype)
    return idx, torch.arange(0, n_bags * length, length, dtype=dtype)


SHAPES = [  # (dtype, dim, layout, bags, length, mode, per-sample weights, padding_idx): every forward entry
    (torch.float32, 128, "csr", 4096, 20, "sum", False, 17),
    (torch.float32, 128, "csr", 4096, 20, "mean", False, -1),
    (torch.float16, 64, "fixed", 4096, 2, "sum", True, 17),
    (torch.float16, 256, "csr", 65536, 4, "sum", True, -1),
    (torch.float32, 256, "csr", 2048, 1, "sum", False, -1),
    (torch.float32, 128, "fixed", 8192, 1, "sum", False, -1),
    (torch.float32, 192, "fixed", 1024, 32, "max", False, 17),
]


@SLOW_BUILD
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_library_packs_what_the_python_packer_packs(on_cpu: Any, shape: tuple[Any, ...]) -> None:
    """For each forward entry: a registered plan is launched with the Python packer's bytes
    (the packer run on the same tensors and the library's output), its grid and block."""
    dtype, dim, layout, bags, length, mode, with_psw, pad = shape
    rows = 5000
    weight = torch.randn(rows, dim).to(dtype)
    if layout == "fixed":
        idx, offsets = torch.randint(0, rows, (bags, length)), None
    else:
        idx, offsets = _csr(bags, length, rows)
    psw = torch.rand(idx.shape).to(dtype) if with_psw else None
    arguments = (idx, weight, offsets, None, False, mode, False, psw, False, None if pad < 0 else pad, CheckMode.IGNORE)
    key = _key(weight, idx, offsets, mode, psw, pad, False)
    assert on_cpu.bag(*arguments) is None and on_cpu.pending()  # not registered yet: a miss
    plan, pack = _register(on_cpu, key)
    out = on_cpu.bag(*arguments)
    assert out is not None and out.shape == (bags, dim) and out.dtype == dtype
    assert on_cpu.pending() is False
    (function, grid, block, params), = _RECORDED
    values = pack(weight.data_ptr(), idx, offsets, psw, pad, None, out.data_ptr(), None, launch._NO_CHECK)
    assert (function, grid, block) == (0xF00D, _grid(plan), plan.block)
    assert params == _host_params(plan.entry).layout.pack(*values), plan.entry


def _host_params(entry: str) -> Any:
    from reference_kernels import nvrtc

    return nvrtc.params(launch.FORWARD_KINDS[entry])


def test_the_shapes_cover_every_one_table_forward_entry() -> None:
    from reference_kernels import tuning
    from reference_kernels.plan import plan_bag_forward
    from tests.kernels.golden_picks import DEVICE

    entries = set()
    for dtype, dim, layout, bags, length, mode, with_psw, pad in SHAPES:
        weight = torch.empty(5000, dim, dtype=dtype)
        idx = torch.empty((bags, length) if layout == "fixed" else (bags * length,), dtype=torch.int64)
        offsets = None if layout == "fixed" else torch.empty(bags, dtype=torch.int64)
        call = launch._bag_call(_key(weight, idx, offsets, mode, weight if with_psw else None, pad, False))
        entries.add(plan_bag_forward(call, DEVICE, tuning.current()).entry)
    assert entries == set(launch.FORWARD_KINDS), entries


@SLOW_BUILD
@pytest.mark.parametrize(("check", "environment", "mode"), [
    ("deferred", None, "deferred"), ("warn", None, "warn"), ("CheckMode.WARN", None, "warn"),
    (None, None, "deferred"), (None, "warn", "warn")])
def test_a_checked_lookup_gets_the_ledger_and_a_fresh_token(on_cpu: Any, check: str | None, environment: str | None,
                                                            mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every spelling of a checking mode and the environment's default, resolved by the caller
    (index_check.resolve_mode: the library takes a CheckMode member and reads no environment),
    reaches that mode's ledger; a spelling handed to the library unresolved is left to Python."""
    import reference_kernels as rk
    from reference_kernels import index_check
    from reference_kernels.plan import plan_checked_bag_forward

    for name in (index_check.MODE_ENV, index_check.SKIP_ENV):
        monkeypatch.delenv(name, raising=False)
    if environment is not None:
        monkeypatch.setenv(index_check.MODE_ENV, environment)
    spelled = index_check.resolve_mode(rk.CheckMode.WARN if check == "CheckMode.WARN" else check)
    weight = torch.randn(3000, 128)
    idx, offsets = _csr(512, 20, 3000)
    arguments = (idx, weight, offsets, None, False, "sum", False, None, False, None, spelled)
    plan, pack = _register(on_cpu, _key(weight, idx, offsets, "sum", None, -1, True), plan_checked_bag_forward)
    assert plan is not None and plan.define("CHECK") == 1
    for unresolved in (check, mode, True, None, "bogus"):
        if unresolved is not spelled:
            assert on_cpu.bag(*arguments[:10], unresolved) is None and _RECORDED == []
    monkeypatch.setenv(index_check.MODE_ENV, "sync")  # read by resolve_mode only, never by the library
    token = next(index_check._TOKENS) + 1  # the library takes the next one
    out = on_cpu.bag(*arguments)
    (_, _, _, params), = _RECORDED
    ledger = (*LEDGERS[mode], token, 1, 3000)
    assert params == _host_params(plan.entry).layout.pack(
        *pack(weight.data_ptr(), idx, offsets, None, -1, None, out.data_ptr(), None, ledger))
    _FLAGS[0] = 1  # a failed check waits to be reported: the Python path takes the next call
    try:
        assert on_cpu.bag(*arguments) is None and len(_RECORDED) == 1
    finally:
        _FLAGS[0] = 0


@SLOW_BUILD
def test_a_checked_call_whose_kernel_cannot_check_runs_the_pass_first(on_cpu: Any) -> None:
    """Max mode keeps the pass: the check kernel on the clean copies' one buffer (the offsets'
    copy 16-byte aligned after the indices'), then the unchecked lookup of the copies."""
    from reference_kernels import index_check

    weight = torch.randn(3000, 64)
    idx, offsets = _csr(300, 7, 3000)  # 2100 indices: the offsets' copy starts at 2100 * 4 bytes
    arguments = (idx, weight, offsets, None, False, "max", False, None, False, None, CheckMode.DEFERRED)
    key = _key(weight, idx, offsets, "max", None, -1, True)
    from reference_kernels.plan import plan_checked_bag_forward

    assert _register(on_cpu, key, plan_checked_bag_forward) == (None, None)  # the Python path said: the pass
    assert on_cpu.bag(*arguments) is None  # no check kernel registered yet
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8)
    clean_key = (*key[:5], torch.int32, *key[6:15], False)
    plan, pack = _register(on_cpu, clean_key)
    token = next(index_check._TOKENS) + 1
    out = on_cpu.bag(*arguments)
    assert out is not None
    (check_fn, check_grid, check_block, check_params), (lookup_fn, _, _, lookup_params) = _RECORDED
    words = struct.unpack("16q", check_params)
    clean = words[9]
    assert (check_fn, check_grid, check_block) == (0xC4EC, 9, 256)  # ceil(2100 / 256)
    assert words[:9] == (idx.data_ptr(), 2100, 3000, offsets.data_ptr(), 300, 0, 0, 1, 0)
    assert words[10:] == (clean + 2100 * 4, *LEDGERS["deferred"], token, 1)
    fake = {"indices": _Tensor(clean, 2100), "offsets": _Tensor(clean + 2100 * 4, 300)}
    assert lookup_fn == 0xF00D and lookup_params == _host_params(plan.entry).layout.pack(
        *pack(weight.data_ptr(), fake["indices"], fake["offsets"], None, -1, None, out.data_ptr(), None,
              launch._NO_CHECK))


@SLOW_BUILD
def test_a_call_with_a_gradient_gets_the_backward_node(on_cpu: Any) -> None:
    weight = torch.randn(2000, 32).requires_grad_(True)
    idx, offsets = _csr(256, 4, 2000)
    key = _key(weight, idx, offsets, "mean", None, 5, False)
    offsets_last = torch.cat([offsets, torch.tensor([idx.numel()])])
    arguments = (idx, weight, offsets_last, None, False, "mean", False, None, True, 5, CheckMode.IGNORE)
    _register(on_cpu, key)
    out = on_cpu.bag(*arguments)
    assert out is not None and out.requires_grad and out.grad_fn.name() == "ReferenceKernelsEmbeddingBagBackward"
    out.backward(torch.ones_like(out))
    (grad_out, saved_weight, saved_idx, saved_offsets, psw, argmax, mode, pad, last, rows, psw_grad), = \
        _BACKWARD_CALLS
    assert saved_weight is None and psw is None and argmax is None and not psw_grad  # as _save_bag saves
    assert saved_idx.data_ptr() == idx.data_ptr() and saved_offsets.data_ptr() == offsets_last.data_ptr()
    assert (mode, pad, last, rows) == ("mean", 5, True, 2000) and torch.equal(grad_out, torch.ones_like(out))
    assert torch.equal(weight.grad, torch.full((2000, 32), 7.0))  # the backward's gradient reaches the weight
    sparse = (*arguments[:6], True, *arguments[7:])
    assert on_cpu.bag(*sparse) is None  # sparse=True: the Python path's sparse gradient
    with torch.no_grad():
        assert on_cpu.bag(*sparse) is not None  # no gradient: served (sparse changes nothing then)


@SLOW_BUILD
def test_a_knob_change_forgets_the_plans(on_cpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from reference_kernels import tuning

    weight = torch.randn(1000, 128)
    idx, offsets = _csr(128, 8, 1000)
    arguments = (idx, weight, offsets, None, False, "sum", False, None, False, None, CheckMode.IGNORE)
    on_cpu.bag(*arguments)  # binds the current knobs
    _register(on_cpu, _key(weight, idx, offsets, "sum", None, -1, False))
    assert on_cpu.bag(*arguments) is not None and on_cpu.plan_count() == 1
    monkeypatch.setattr(tuning, "_CURRENT", replace(tuning.current()))
    assert on_cpu.bag(*arguments) is None and on_cpu.plan_count() == 0


@SLOW_BUILD
def test_a_checked_call_with_a_gradient_saves_the_pass_copies(on_cpu: Any) -> None:
    """With a gradient the check always takes the pass (the backward reads its copies, as on the
    Python path), and the copies are tensors of their own, which the backward node keeps."""
    from reference_kernels import index_check

    weight = torch.randn(1500, 64).requires_grad_(True)
    idx, offsets = _csr(200, 5, 1500)
    arguments = (idx, weight, offsets, None, False, "sum", False, None, False, None, CheckMode.WARN)
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8)
    assert on_cpu.bag(*arguments) is None  # the clean lookup is not registered yet
    plan, pack = _register(on_cpu, (*_key(weight, idx, offsets, "sum", None, -1, False)[:5], torch.int32,
                                    *_key(weight, idx, offsets, "sum", None, -1, False)[6:]))
    token = next(index_check._TOKENS) + 1
    out = on_cpu.bag(*arguments)
    assert out is not None and out.requires_grad
    (check_fn, _, _, check_params), (lookup_fn, _, _, lookup_params) = _RECORDED
    words = struct.unpack("16q", check_params)
    assert check_fn == 0xC4EC and words[11:] == (*LEDGERS["warn"], token, 1)
    out.backward(torch.ones_like(out))
    (_, _, saved_idx, saved_offsets, *_rest), = _BACKWARD_CALLS
    assert saved_idx.dtype == torch.int32 and saved_idx.shape == idx.shape and saved_idx.data_ptr() == words[9]
    assert saved_offsets.dtype == torch.int32 and saved_offsets.data_ptr() == words[10]
    assert lookup_params == _host_params(plan.entry).layout.pack(
        *pack(weight.data_ptr(), saved_idx, saved_offsets, None, -1, None, out.data_ptr(), None, launch._NO_CHECK))


# ---------------------------------------------------------------------------------------------
# The table-batched module's calls (tbe): the same launches as the Python path's tbe_forward_impl
# and check_tables.

class _Tables:
    """A table-batched call's tensors on the CPU, as TableBatchedEmbeddingBag holds and takes them."""

    def __init__(self, sizes: list[int], dim: int, bags: int, length: int, dtype: Any = torch.float32,
                 index_dtype: Any = torch.int64, psw: bool = False) -> None:
        self.sizes = torch.tensor(sizes)
        self.rows = torch.cumsum(self.sizes, 0) - self.sizes
        self.max_rows = max(sizes)
        self.weight = torch.randn(sum(sizes), dim).to(dtype)
        self.indices = torch.cat([torch.randint(0, s, (bags * length,)) for s in sizes]).to(index_dtype)
        self.offsets = torch.arange(0, len(sizes) * bags * length + 1, length, dtype=index_dtype)
        self.psw = torch.rand(self.indices.shape).to(dtype) if psw else None
        self.bags = bags

    def arguments(self, mode: str = "sum", check: Any = False, update: Any = False) -> tuple[Any, ...]:
        """The library's tbe arguments; ``check`` as the module resolves it (a CheckMode member)."""
        return (self.weight, self.rows, self.sizes, self.indices, self.offsets, self.psw, mode, resolve_mode(check),
                self.max_rows, update)

    def key(self, mode: str, index_dtype: Any = None) -> tuple[Any, ...]:
        """The Python path's BagKey of the lookup (tbe_forward_impl's bag_forward call)."""
        tables = self.sizes.numel()
        return (self.weight.dtype, self.weight.shape[0], self.weight.shape[1], self.weight.data_ptr() % 16, True,
                index_dtype or self.indices.dtype, 0, self.indices.numel(), tables * self.bags, tables, True, mode,
                self.psw is not None, False, False, False)


@SLOW_BUILD
@pytest.mark.parametrize("mode, psw, dtype", [("sum", False, torch.float32), ("mean", False, torch.float16),
                                              ("sum", True, torch.bfloat16), ("max", False, torch.float32)])
def test_a_table_batched_call_packs_what_the_python_packer_packs(on_cpu: Any, mode: str, psw: bool,
                                                                 dtype: Any) -> None:
    t = _Tables([300, 1000, 7, 2500], 64, 512, 6, dtype, psw=psw)
    assert on_cpu.tbe(*t.arguments(mode)) is None and on_cpu.pending()  # not registered yet: a miss
    plan, pack = _register(on_cpu, t.key(mode))
    out = on_cpu.tbe(*t.arguments(mode))
    assert out is not None and out.shape == (512, 4 * 64) and out.dtype == dtype and not on_cpu.pending()
    (function, grid, block, params), = _RECORDED
    values = pack(t.weight.data_ptr(), t.indices, t.offsets, t.psw, -1, t.rows, out.data_ptr(), None,
                  launch._NO_CHECK)
    assert (function, grid, block) == (0xF00D, _grid(plan), plan.block)
    assert params == _host_params(plan.entry).layout.pack(*values), plan.entry


@SLOW_BUILD
@pytest.mark.parametrize("mode", ["deferred", "warn"])
def test_a_checked_table_batched_call_runs_the_table_pass_then_the_lookup(on_cpu: Any, mode: str) -> None:
    """As check_tables: the pass with the tables' sizes (its TABLE_CAP variant, the largest table's
    rows as its bound, the module's op code) into the clean copies, then the lookup of the copies."""
    from reference_kernels import index_check

    t = _Tables([3000, 20, 900], 32, 100, 7)  # 2100 indices: the offsets' copy starts at 2100 * 4 bytes
    _register(on_cpu, t.key("sum"))  # the unchecked lookup only: a checked call still misses
    assert on_cpu.tbe(*t.arguments("sum", mode)) is None
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8, 512)  # another cap: still a miss
    assert on_cpu.tbe(*t.arguments("sum", mode)) is None
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8, index_check.table_cap(3))
    assert on_cpu.tbe(*t.arguments("sum", mode)) is None  # the lookup of the int32 copies is not registered
    plan, pack = _register(on_cpu, t.key("sum", torch.int32))
    token = next(index_check._TOKENS) + 1
    out = on_cpu.tbe(*t.arguments("sum", mode))
    assert out is not None and out.shape == (100, 96)
    (check_fn, check_grid, check_block, check_params), (lookup_fn, _, _, lookup_params) = _RECORDED
    words = struct.unpack("16q", check_params)
    clean = words[9]
    assert (check_fn, check_grid, check_block) == (0xC4EC, 9, 256)  # ceil(2100 / 256)
    assert words[:9] == (t.indices.data_ptr(), 2100, 3000, t.offsets.data_ptr(), 301, t.sizes.data_ptr(), 3, 100, 0)
    assert words[10:] == (clean + 2100 * 4, *LEDGERS[mode], token, index_check._OP_CODES["TableBatchedEmbeddingBag"])
    fake = {"indices": _Tensor(clean, 2100), "offsets": _Tensor(clean + 2100 * 4, 301)}
    assert lookup_fn == 0xF00D and lookup_params == _host_params(plan.entry).layout.pack(
        *pack(t.weight.data_ptr(), fake["indices"], fake["offsets"], None, -1, t.rows, out.data_ptr(), None,
              launch._NO_CHECK))


@SLOW_BUILD
def test_a_table_batched_call_with_a_gradient_gets_its_node(on_cpu: Any) -> None:
    """The weight's gradient through the module's backward on what its Function saves (the pass's
    own copies when it checks); per-sample weights get none, as from the op."""
    t = _Tables([50, 60], 16, 40, 3, psw=True)
    t.weight.requires_grad_(True)
    t.psw.requires_grad_(True)
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8, 64)
    _register(on_cpu, t.key("sum", torch.int32))
    out = on_cpu.tbe(*t.arguments("sum", "warn"))
    assert out is not None and out.requires_grad and out.grad_fn.name() == "ReferenceKernelsTableBatchedBackward"
    out.backward(torch.ones_like(out))
    (grad_out, rows, saved_idx, saved_offsets, psw, mode, num_weights), = _BACKWARD_CALLS
    words = struct.unpack("16q", _RECORDED[0][3])
    assert saved_idx.dtype == torch.int32 and saved_idx.data_ptr() == words[9]  # the pass's copies
    assert saved_offsets.dtype == torch.int32 and saved_offsets.data_ptr() == words[10]
    assert rows is t.rows or rows.data_ptr() == t.rows.data_ptr()
    assert psw.data_ptr() == t.psw.data_ptr() and (mode, num_weights) == ("sum", 110)
    assert torch.equal(grad_out, torch.ones_like(out))
    assert torch.equal(t.weight.grad, torch.full((110, 16), 5.0)) and t.psw.grad is None
    # the module's own backward gives the per-sample weights none: a call whose weights want one is Python's
    assert on_cpu.tbe(*t.arguments("sum", "warn", update=True)) is None
    t.weight.requires_grad_(False)
    assert on_cpu.tbe(*t.arguments("sum", "warn")) is None  # a gradient for the per-sample weights alone
    with torch.no_grad():
        assert on_cpu.tbe(*t.arguments("sum", "warn", update=True)) is not None


@SLOW_BUILD
@pytest.mark.parametrize("sparse", [True, False], ids=["sparse gradient", "fused optimizer"])
def test_a_sparse_or_fused_call_with_a_gradient_gets_the_modules_own_backward(on_cpu: Any, sparse: bool) -> None:
    """A module with a sparse gradient or a fused optimizer: the same check pass and lookup, and a
    node that hands the module's backward what SparseTBE saves (the weight, the pass's copies) and
    the module's update (True, or its optimizer state, the same object at every step)."""
    t = _Tables([50, 60], 16, 40, 3, psw=True)
    t.weight.requires_grad_(True)
    state = True if sparse else object()
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8, 64)
    _register(on_cpu, t.key("sum", torch.int32))
    for step in range(2):
        _RECORDED.clear()
        _BACKWARD_CALLS.clear()
        out = on_cpu.tbe(*t.arguments("sum", "deferred", update=state))
        assert out is not None and out.grad_fn.name() == "ReferenceKernelsTableBatchedUpdate"
        assert [fn for fn, *_ in _RECORDED] == [0xC4EC, 0xF00D]  # the check pass, then the lookup
        out.backward(torch.ones_like(out))
        (grad_out, weight, rows, saved_idx, saved_offsets, psw, mode, update), = _BACKWARD_CALLS
        words = struct.unpack("16q", _RECORDED[0][3])
        assert weight is t.weight and rows.data_ptr() == t.rows.data_ptr() and update is state
        assert saved_idx.dtype == torch.int32 and saved_idx.data_ptr() == words[9]  # the pass's copies
        assert saved_offsets.data_ptr() == words[10] and psw.data_ptr() == t.psw.data_ptr() and mode == "sum"
        assert torch.equal(grad_out, torch.ones_like(out))
        if sparse:
            assert torch.equal(t.weight.grad, torch.full((110, 16), 3.0 * (step + 1)))
        else:
            assert t.weight.grad is None  # the update wrote the rows: no gradient
    with pytest.raises(RuntimeError, match="second time"):
        out.backward(torch.ones_like(out))  # the saved tensors were released after the first backward


@SLOW_BUILD
def test_table_batched_calls_it_must_not_serve_are_left_to_python(on_cpu: Any) -> None:
    from reference_kernels import index_check

    t = _Tables([40, 40, 40], 8, 16, 2)
    _register(on_cpu, t.key("sum"))
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8, 64)
    _register(on_cpu, t.key("sum", torch.int32))
    assert on_cpu.tbe(*t.arguments("sum")) is not None and on_cpu.tbe(*t.arguments("sum", None)) is not None
    odd = (*t.arguments()[:4], t.offsets[:-1], *t.arguments()[5:])  # T * B entries: no last offset
    mixed = (*t.arguments()[:4], t.offsets.int(), *t.arguments()[5:])  # offsets of another dtype
    weights = (*t.arguments()[:5], torch.rand(t.indices.numel()), "mean", *t.arguments()[7:])  # psw with mean
    for name, arguments in {"sync": t.arguments("sum", "sync"), "sync (True)": t.arguments("sum", True),
                            "odd offsets": odd, "mixed dtypes": mixed, "psw with mean": weights}.items():
        assert on_cpu.tbe(*arguments) is None, name
    many = _Tables([2] * 4096, 8, 1, 1)  # past the largest table cap the pass needs spans from torch
    _register(on_cpu, many.key("sum", torch.int32))
    on_cpu.offer_check(0, torch.int64, torch.int32, 0xC4EC, 256, 132 * 8, 4096)
    assert index_check.table_cap(4096) == -1 and on_cpu.tbe(*many.arguments("sum", "deferred")) is None
    with pytest.raises(TypeError, match="10 positional arguments"):
        on_cpu.tbe(*t.arguments()[:9])


def test_the_module_hands_the_library_its_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """TableBatchedEmbeddingBag.forward gives the library its tensors and state (the check mode,
    the largest table, the backward of its own: its fused state, True for a sparse gradient, False
    for none) and returns what the library returns."""
    from reference_kernels import optim
    from reference_kernels.errors import CheckMode
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    seen: list[tuple[Any, ...]] = []
    answer = torch.zeros(2, 8)
    loaded = host.HostPath(bag=lambda *a: None, is_compiling=lambda: False, library=None,
                           tbe=lambda *a: seen.append(a) or answer)
    monkeypatch.setattr(host, "LOADED", [loaded])
    monkeypatch.setattr("reference_kernels.tbe._HOST_PATH", host.LOADED)
    module = TableBatchedEmbeddingBag([5, 9], 4, "mean", optimizer=optim.SGD(lr=0.1), check_indices="warn")
    idx, offsets = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2, 3, 3])
    assert module(idx, offsets) is answer
    (weight, rows, sizes, indices, offs, psw, mode, check, max_rows, update), = seen
    assert weight is module.weight and rows is module.table_rows and sizes is module.table_sizes
    assert indices is idx and offs is offsets and psw is None
    assert (mode, max_rows) == ("mean", 9) and check is CheckMode.WARN  # the member resolved at construction
    assert update is module.optimizer_state and update.spec is module.optimizer  # the fused state
    seen.clear()
    sparse = TableBatchedEmbeddingBag([5, 9], 4, "mean", sparse=True)
    plain = TableBatchedEmbeddingBag([5, 9], 4, "mean")
    assert sparse(idx, offsets) is answer and plain(idx, offsets) is answer
    assert [call[9] for call in seen] == [True, False]  # a sparse gradient; the op's gradient


def test_the_package_binds_the_library_from_above(monkeypatch: pytest.MonkeyPatch) -> None:
    """host.py imports nothing above it: the package's __init__ registers host_binding, which gives a
    loaded library host_path.cpp's init arguments in its order (the index check's modes by code and
    tokens, the tuning and launch modules whose _CURRENT and POISON_OUTPUTS it reads, the ops' and
    tbe's backward) and, once published, every ledger made before."""
    from reference_kernels import host_binding, index_check, tbe, tuning

    calls: list[tuple[str, tuple[Any, ...]]] = []
    stand_in = type("Library", (), {"init": lambda self, *a: calls.append(("init", a)),
                                     "set_launch_ex": lambda self, *a: calls.append(("set_launch_ex", a)),
                                     "set_ledger": lambda self, *a: calls.append(("set_ledger", a))})()
    monkeypatch.setattr(host, "launch_address", lambda: 0x1234)
    monkeypatch.setattr(host, "launch_ex_address", lambda: 0x5678)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    book = type("Book", (), {"device_index": 3, "pointers": LEDGERS})()
    monkeypatch.setattr(index_check, "_LEDGERS", {3: book})
    assert host._binding() is host_binding.BINDING
    assert host.bind(stand_in) is stand_in
    host._binding().published(stand_in)
    (_, init), launch_ex, (_, ledger) = calls
    assert launch_ex == ("set_launch_ex", (0x5678,))
    assert len(init) == 12 and init[0] == 0x1234
    assert init[3:6] == (index_check.HOST_MODES, index_check._TOKENS, tuning)
    assert init[6:8] == (host.raise_launch_error, launch)
    assert init[9:] == (ops.host_path_backward, tbe.host_path_backward, tbe.host_path_update)
    assert hasattr(tuning, "_CURRENT") and hasattr(launch, "POISON_OUTPUTS")  # the names host_path.cpp reads
    assert ledger == (3, ctypes.addressof(index_check.FLAGS), LEDGERS["deferred"], LEDGERS["warn"])


def test_a_checked_lookup_reaches_the_index_check_registered_with_the_launcher() -> None:
    from reference_kernels import index_check

    assert launch._index_check() is index_check


# ---------------------------------------------------------------------------------------------
# launch_raw: the Python path's own launches through the library (the backward's preparation,
# sort and passes).

@SLOW_BUILD
def test_the_python_paths_launches_go_through_the_library_once_it_is_loaded(on_cpu: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``launch._launch_packed`` hands the library the function, grid, block, the current stream and
    the packed parameters; the driver sees what the Python packer packed, and a refused launch
    raises the LaunchError that names the CUresult."""
    from reference_kernels import nvrtc

    signature = nvrtc.params("PqPq")
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 0)
    monkeypatch.setattr(launch, "_HOST_PATH", [_loaded(on_cpu)])
    launch._launch_packed(0, 0xBEEF, 9, 128, signature, (0x1000, 7, 0x2000, -3))
    launch._launch_packed(0, 0xBEEF, 0, 128, signature, (0x1000, 7, 0x2000, -3))  # an empty grid: nothing
    (function, grid, block, params), = _RECORDED
    assert (function, grid, block) == (0xBEEF, 9, 128)
    assert params == signature.layout.pack(0x1000, 7, 0x2000, -3)
    refusing = type("Refusing", (), {"launch_raw": lambda self, *args: 1})()  # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(launch, "_HOST_PATH", [_loaded(refusing)])
    with pytest.raises(nvrtc.LaunchError, match="CUDA_ERROR_INVALID_VALUE.*grid 9, block 128"):
        launch._launch_packed(0, 0xBEEF, 9, 128, signature, (0x1000, 7, 0x2000, -3))
    with pytest.raises(TypeError, match="5 arguments"):
        on_cpu.launch_raw(0xBEEF, 9, 128)


# cuda.h's CUlaunchAttribute and CUlaunchConfig, as a recording cuLaunchKernelEx reads them
class _Attribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


class _Config(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("num_attrs", ctypes.c_uint)]


_EX_RECORDED: list[tuple[Any, ...]] = []


def _record_launch_ex(config: Any, function: int, params: int, extra: Any) -> int:
    c = config.contents
    attributes = [(c.attrs[i].id, c.attrs[i].value) for i in range(c.num_attrs)]
    buffer, size = extra[1], ctypes.cast(extra[3], ctypes.POINTER(ctypes.c_size_t))[0]
    _EX_RECORDED.append((function, tuple(c.grid), tuple(c.block), c.shared_bytes, c.stream, attributes, params,
                         ctypes.string_at(buffer, size)))
    return 0


_RECORD_LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p))(_record_launch_ex)


@SLOW_BUILD
def test_launches_are_programmatic_once_the_library_has_cuLaunchKernelEx(on_cpu: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With cuLaunchKernelEx's address set, every launch (launch_raw here) goes through it with the
    same function, 1-D grid and block, stream and parameters, and one attribute: programmatic stream
    serialization (6) allowed; set back to 0, launches are plain cuLaunchKernel again."""
    from reference_kernels import nvrtc

    signature = nvrtc.params("PqPq")
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 0x77)
    monkeypatch.setattr(launch, "_HOST_PATH", [_loaded(on_cpu)])
    _EX_RECORDED.clear()
    assert on_cpu.set_launch_ex(ctypes.cast(_RECORD_LAUNCH_EX, ctypes.c_void_p).value) is False
    try:
        launch._launch_packed(0, 0xBEEF, 9, 128, signature, (0x1000, 7, 0x2000, -3))
    finally:
        assert on_cpu.set_launch_ex(0) is True
    (function, grid, block, shared, stream, attributes, params, packed), = _EX_RECORDED
    assert (function, grid, block, shared, stream, params) == (0xBEEF, (9, 1, 1), (128, 1, 1), 0, 0x77, None)
    assert attributes == [(6, 1)]
    assert packed == signature.layout.pack(0x1000, 7, 0x2000, -3)
    assert _RECORDED == []
    launch._launch_packed(0, 0xBEEF, 9, 128, signature, (0x1000, 7, 0x2000, -3))
    assert len(_RECORDED) == 1 and len(_EX_RECORDED) == 1
