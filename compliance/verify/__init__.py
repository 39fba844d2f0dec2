"""``compliance verify`` / ``check --verify``: build declared kernels from source, compare with torch.

Importing this package is cheap: torch is imported only by the per-kernel
runner subprocess (``compliance.verify.runner``). docs/verification.md
describes the manifest's ``build:`` block, the argument vocabulary, the case
matrix, the error-bound model and the trust model.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from compliance.errors import InputError

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.engine import CheckOptions
    from compliance.findings import Finding
    from compliance.verify.driver import VerifyOptions


def default_build_root() -> Path:
    """``$COMPLIANCE_BUILD_DIR``, else ``$XDG_CACHE_HOME/compliance/verify``, else ``~/.cache/...``."""
    explicit = os.environ.get("COMPLIANCE_BUILD_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "compliance" / "verify"


def new_seed() -> int:
    """A fresh random seed (printed, so a run can be repeated with ``--seed``)."""
    return secrets.randbits(31)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def verify_options(root: Path, options: CheckOptions) -> VerifyOptions:
    """``CheckOptions`` (seed, ``extra``) as ``VerifyOptions``; the build root must lie outside ``root``."""
    from compliance.verify.driver import DEFAULT_BUILD_TIMEOUT_S, VerifyOptions

    extra = options.extra
    build_root = Path(extra.get("build_dir") or default_build_root()).resolve()
    tree = root.resolve()
    if build_root == tree or tree in build_root.parents:
        raise InputError("the build directory must lie outside the checked tree", build_root)
    return VerifyOptions(
        seed=options.seed if options.seed is not None else new_seed(), build_root=build_root,
        kernels=tuple(extra.get("kernels", ())),
        build_timeout_s=int(extra.get("build_timeout_s", DEFAULT_BUILD_TIMEOUT_S)),
        time_limit_s=extra.get("time_limit_s"), large=bool(extra.get("large", True)),
        progress=extra.get("progress", _stderr))


def run_verification_checks(ctx: CheckContext, options: CheckOptions) -> list[Finding]:
    """Findings of building and verifying every declared kernel (the ``verify`` stage)."""
    from compliance.verify.driver import verify_kernels

    opts = verify_options(ctx.root, options)
    known = {k.kernel.id for k in ctx.kernels()}
    missing = sorted(set(opts.kernels) - known)
    if missing:
        raise InputError(f"no declared kernel with id {', '.join(missing)}; declared: "
                         f"{', '.join(sorted(known)) or 'none'}")
    return verify_kernels(ctx, opts)
