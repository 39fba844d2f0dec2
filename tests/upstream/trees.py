"""Submission trees for the upstream tests: one organization, one DLRM implementation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

RULES = Path(__file__).parent / "data" / "rules-local.yaml"
"""Rule set allowing local upstreams (tests only)."""
IMPL = "Acme/benchmarks/dlrm/implementations/pytorch"
"""Implementation directory, relative to the tree root."""
SOURCE = "csrc/emb.cu"
"""The declared kernel source, relative to the implementation."""


def _skeleton(root: Path) -> None:
    (root / "Acme/systems").mkdir(parents=True)
    (root / "Acme/systems/sys1.json").write_text(json.dumps({"submitter": "Acme", "system_name": "sys1"}))
    results = root / "Acme/results/sys1/dlrm"
    results.mkdir(parents=True)
    (results / "result_0.txt").write_text(":::MLLOG {}\n")


def kernel_entry(repository: str, commit: str, paths: list[str] | None = None) -> dict[str, Any]:
    """A manifest kernel entry for csrc/emb.cu with the given upstream."""
    return {"id": "acme-emb", "category": "dlrm-embedding", "language": "cuda", "sources": [SOURCE],
            "entry_symbols": ["emb_sum_kernel"],
            "upstream": {"repository": repository, "commit": commit, "paths": paths or [SOURCE]},
            "semantics": {"op": "embedding_bag", "modes": ["sum"], "layouts": ["fixed"]}}


def write_tree(root: Path, source: bytes, kernels: list[dict[str, Any]],
               vendored: list[dict[str, Any]] | None = None,
               files: dict[str, bytes] | None = None) -> Path:
    """A tree whose implementation ships ``source`` at csrc/emb.cu and declares ``kernels``."""
    _skeleton(root)
    impl = root / IMPL
    (impl / "csrc").mkdir(parents=True)
    (impl / SOURCE).write_bytes(source)
    manifest: dict[str, Any] = {"manifest_version": 1, "kernels": kernels}
    if vendored:
        manifest["vendored"] = vendored
    (impl / "kernel_manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    for rel, data in (files or {}).items():
        (impl / rel).parent.mkdir(parents=True, exist_ok=True)
        (impl / rel).write_bytes(data)
    return root
