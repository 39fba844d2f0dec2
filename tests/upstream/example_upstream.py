"""The example submission's upstream repositories, rebuilt locally and deterministically.

``submissions_example`` declares upstream links on github.com that do not
exist; the tests build each repository here from the example's own sources
(fixed author, committer and dates, so the commit hash never changes unless
the sources do) and point git at it with ``url.<fixture>.insteadOf``.

After editing the example's kernel sources, print the new pins with
``python3 -m tests.upstream.example_upstream`` and write them into the
manifests' ``upstream:`` blocks with ``--write``.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from compliance.manifest import MANIFEST_NAME, Manifest, load_manifest
from compliance.upstream.kernel_sources import upstream_path
from tests.upstream.repos import RepoBuilder

EXAMPLE = Path(__file__).resolve().parents[2] / "submissions_example"
"""The example submission tree."""
README = b"# DLRM embedding kernels (test fixture standing in for the example's upstream repository)\n"


@dataclass
class UpstreamSpec:
    """What one upstream repository must contain for the example to verify."""

    url: str
    """Repository URL as the manifests declare it."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Upstream path -> content."""
    pinned: set[str] = field(default_factory=set)
    """Commits the manifests pin for this URL."""

    def add(self, path: str, data: bytes, where: str) -> None:
        """Record that ``path`` must hold ``data`` upstream."""
        if self.files.setdefault(path, data) != data:
            raise ValueError(f"{where}: two different files declared at {self.url} {path}")


def _manifests(root: Path) -> list[Manifest]:
    return [load_manifest(path) for path in sorted(root.rglob(MANIFEST_NAME))]


def example_upstreams(root: Path = EXAMPLE) -> dict[str, UpstreamSpec]:
    """Every upstream repository the example's manifests name, with the files they expect."""
    specs: dict[str, UpstreamSpec] = {}
    for manifest in _manifests(root):
        for kernel in manifest.kernels:
            if kernel.upstream is None:
                continue
            spec = specs.setdefault(kernel.upstream.repository, UpstreamSpec(kernel.upstream.repository))
            spec.pinned.add(kernel.upstream.commit)
            for source, path in zip(kernel.sources, kernel.upstream.paths, strict=False):
                spec.add(upstream_path(path), manifest.resolve(source).read_bytes(), str(manifest.path))
        for vendored in manifest.vendored:
            spec = specs.setdefault(vendored.repository, UpstreamSpec(vendored.repository))
            spec.pinned.add(vendored.commit)
            base = manifest.resolve(vendored.path)
            for file in sorted(p for p in base.rglob("*") if p.is_file()):
                rel = file.relative_to(base).as_posix()
                spec.add(f"{vendored.upstream_path}/{rel}" if vendored.upstream_path else rel,
                         file.read_bytes(), str(manifest.path))
    return specs


def build_example_upstream(spec: UpstreamSpec, dest: Path) -> str:
    """Build the fixture repository for ``spec`` at ``dest``; returns its main commit."""
    builder = RepoBuilder(dest)
    builder.commit({"README.md": README}, "initial")
    return builder.commit(dict(sorted(spec.files.items())), "add DLRM embedding kernels")


def write_pins(pins: dict[str, str], root: Path = EXAMPLE) -> list[Path]:
    """Replace the pinned commit of each URL in the manifests' entries; returns the files changed."""
    changed = []
    for manifest in _manifests(root):
        text = manifest.path.read_text()
        new = text
        for url, commit in pins.items():
            olds = {k.upstream.commit for k in manifest.kernels if k.upstream and k.upstream.repository == url}
            olds |= {v.commit for v in manifest.vendored if v.repository == url}
            for old in olds - {commit}:
                new = re.sub(rf"(\bcommit:\s*[\"']?){re.escape(old)}\b", rf"\g<1>{commit}", new)
        if new != text:
            manifest.path.write_text(new)
            changed.append(manifest.path)
    return changed


def main() -> None:
    """Print (or, with --write, store) the commit each example upstream must be pinned to."""
    parser = argparse.ArgumentParser(description="Pins for the example submission's upstream fixtures.")
    parser.add_argument("--write", action="store_true", help="write the pins into the example manifests")
    args = parser.parse_args()
    pins = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, (url, spec) in enumerate(sorted(example_upstreams().items())):
            pins[url] = build_example_upstream(spec, Path(tmp) / str(index))
            print(f"{url} {pins[url]}")
    if args.write:
        for path in write_pins(pins):
            print(f"updated {path}")


if __name__ == "__main__":
    main()
