"""``compliance verify`` / ``check --verify``: build declared kernels from source, compare with torch.

Importing this package is cheap: torch is imported only when kernels are
verified, by the verifier (``compliance.verify.judge``, which makes the inputs
and judges the outputs) and by the per-kernel process that runs the
submission's code and nothing else (``compliance.verify.kernel_process``). docs/verification.md
describes the manifest's ``build:`` block, the argument vocabulary, the case
matrix, the error-bound model and the trust model.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from compliance.cachedir import VERIFY
from compliance.errors import InputError
from compliance.verify.options import VerifyOptions

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding
    from compliance.verify.driver import VerifySettings


def new_seed() -> int:
    """A fresh random seed (printed, so a run can be repeated with ``--seed``)."""
    return secrets.randbits(31)


def verify_settings(root: Path, options: VerifyOptions) -> VerifySettings:
    """``options`` resolved (seed drawn, build root chosen); the build root must lie outside ``root``."""
    from compliance.verify.driver import VerifySettings
    from compliance.verify.run_state import RunRegistry

    build_root = VERIFY.resolve(options.build_dir)
    tree = root.resolve()
    if build_root == tree or tree in build_root.parents:
        raise InputError("the build directory must lie outside the checked tree", build_root)
    return VerifySettings(
        seed=options.seed if options.seed is not None else new_seed(), build_root=build_root,
        kernels=options.kernels, build_timeout_s=options.build_timeout_s,
        time_limit_s=options.time_limit_s, large=options.large, progress=options.progress,
        allow_unverified=options.allow_unverified, runs=RunRegistry(build_root))


def run_verification_checks(ctx: CheckContext, options: VerifyOptions) -> list[Finding]:
    """Findings of building and verifying every declared kernel (the ``verify`` stage)."""
    from compliance.verify.driver import verify_kernels

    settings = verify_settings(ctx.root, options)
    known = {k.kernel.id for k in ctx.kernels()}
    missing = sorted(set(settings.kernels) - known)
    if missing:
        raise InputError(f"no declared kernel with id {', '.join(missing)}; declared: "
                         f"{', '.join(sorted(known)) or 'none'}")
    return verify_kernels(ctx, settings)


@dataclass(frozen=True)
class VerifyStage:
    """The verification stage with its options."""

    options: VerifyOptions = VerifyOptions()
    """Seed, build directory, kernel filter, time limits, progress sink."""
    name: ClassVar[str] = "verify"

    def run(self, ctx: CheckContext) -> list[Finding]:
        """Build and verify every declared (or selected) kernel."""
        return run_verification_checks(ctx, self.options)
