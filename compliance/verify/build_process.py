"""The build-only process: ``python -m compliance.verify.build_process JOB.json``.

Runs torch.utils.cpp_extension's ninja build of an extension from the verifier's private copy of the
kernel's files into the directory the verifier chose, and stops there: the module is not imported,
so no submission code runs in this process. The verifier hashes the module it produced.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Build; exit status 0 when the module was written."""
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    from torch.utils import cpp_extension

    build = cpp_extension._write_ninja_file_and_build_library
    wanted = {"name": job["name"], "sources": job["sources"], "extra_cflags": job["extra_cflags"],
              "extra_cuda_cflags": job["extra_cuda_cflags"], "extra_sycl_cflags": None, "extra_ldflags": None,
              "extra_include_paths": job["include_dirs"], "build_directory": job["build_directory"],
              "verbose": True, "with_cuda": job["with_cuda"], "with_sycl": False, "is_standalone": False}
    accepted = inspect.signature(build).parameters
    try:
        build(**{k: v for k, v in wanted.items() if k in accepted})
    except Exception as exc:  # noqa: BLE001  (compiler errors arrive as RuntimeError and friends)
        print(f"error: building the extension failed: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
