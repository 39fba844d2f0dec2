"""Containers opened by their members, within bounds, whatever bytes they hold."""

from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compliance import containers
from compliance.containers import container_kind, examine_container
from tests.compliance.treeutil import archive_bytes

KERNEL = "__global__ void k(float* x) { x[0] = 1.0f; }\n"


def examine(data: bytes, name: str = "x") -> containers.Contents:
    kind = container_kind(data[:512])
    assert kind is not None
    return examine_container(kind, io.BufferedReader(io.BytesIO(data)), name)  # type: ignore[arg-type]


def test_members_are_named_through_every_level() -> None:
    inner = {"archive": {"format": "zip", "members": {"m/_x.so": {"binary": "elf-so"}, "m/k.cu": KERNEL}}}
    data = archive_bytes({"format": "tar.gz", "members": {"dist/inner.whl": inner, "README": "hi\n"}})
    found = examine(data, "bundle.tgz")
    assert found.binaries == [("bundle.tar!/dist/inner.whl!/m/_x.so", "elf-shared-object")]
    assert [(name, markers[0][0]) for name, markers, _ in found.sources] == [
        ("bundle.tar!/dist/inner.whl!/m/k.cu", "extension-file")]


def _ar_member(name: bytes, data: bytes) -> bytes:
    header = name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"644".ljust(8)
    return header + str(len(data)).encode().ljust(10) + b"`\n" + data + (b"\n" if len(data) % 2 else b"")


def test_an_ar_archive_with_gnu_long_names_is_read_member_by_member() -> None:
    from tests.compliance.treeutil import fake_binary
    long_names = b"a_rather_long_object_name.o/\n"
    data = b"!<arch>\n" + _ar_member(b"/", b"\0\0\0\0") + _ar_member(b"//", long_names) \
        + _ar_member(b"/0", fake_binary("elf-o")) + _ar_member(b"notes.txt/", KERNEL.encode())
    found = examine(data)
    assert found.binaries == [("a_rather_long_object_name.o", "elf-relocatable")]
    assert [name for name, _, _ in found.sources] == ["notes.txt"]


def test_nesting_past_the_bound_is_over_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    spec: dict = {"format": "zip", "members": {"k.cu": KERNEL}}
    for _ in range(containers.MAX_DEPTH + 1):
        spec = {"format": "zip", "members": {"inner.zip": {"archive": spec}}}
    assert "nested deeper" in (examine(archive_bytes(spec)).over_limit or "")


def test_a_zip_bomb_stops_at_the_expansion_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containers, "MAX_EXPANDED_BYTES", 1 << 20)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\0" * (4 << 20))
    assert "expands past" in (examine(out.getvalue()).over_limit or "")


def test_too_many_members_is_over_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containers, "MAX_MEMBERS", 3)
    data = archive_bytes({"format": "tar", "members": {f"f{i}.txt": "x\n" for i in range(5)}})
    assert "more than 3 members" in (examine(data).over_limit or "")


def test_an_encrypted_or_corrupt_container_stays_unopened() -> None:
    data = bytearray(archive_bytes({"format": "zip", "members": {"a.txt": "secret\n"}}))
    data[6] |= 1  # the local header's "encrypted" flag
    data[data.index(b"PK\x01\x02") + 8] |= 1  # and the central directory's
    assert "encrypted" in (examine(bytes(data)).unopened or "")
    assert examine(b"PK\x03\x04" + bytes(200)).unopened is not None


def test_member_names_never_climb() -> None:
    data = archive_bytes({"format": "zip", "members": {"../../../x/k.cu": KERNEL}})
    assert examine(data).sources[0][0] == "(..)/(..)/(..)/x/k.cu"


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2048), st.sampled_from([b"PK\x03\x04", b"\x1f\x8b\x08", b"BZh9", b"\xfd7zXZ\x00",
                                                  b"!<arch>\n"]))
def test_hostile_bytes_never_raise(tail: bytes, magic: bytes) -> None:
    found = examine(magic + tail)
    assert found.unopened is not None or found.over_limit is not None or found.members >= 0
