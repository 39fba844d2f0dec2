"""``python3 -m benchmarks <command> [args]``: the benchmark suite, an experiment or a speed check.

Commands: ``suite`` (benchmarks/harness.py: every figure of the kernel benchmark), ``charts``
(benchmarks/charts.py: the figures of a suite's results file, rendered again), ``fbgemm_peer``
(where FBGEMM's forward op would be loaded from, or why not), ``training_suite``
(benchmarks/training_suite.py: training steps of ours, FBGEMM and torch), ``training_dlrm``
(its whole-DLRM-step case alone), ``results_branch`` (benchmarks/results_branch.py: result
files onto the ``bench-results`` branch), each module
of benchmarks/experiments/ by its name, and ``speed_check`` / ``round_speed``
(benchmarks/compliance/). ``list`` prints them with their first docstring line.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def commands() -> dict[str, str]:
    """Command name -> the module that runs it (its ``main``, or ``module:function``)."""
    found = {"suite": "benchmarks.harness", "charts": "benchmarks.charts", "fbgemm_peer": "benchmarks.fbgemm_peer",
             "training_suite": "benchmarks.training_suite",
             "training_dlrm": "benchmarks.training_suite:main_dlrm_alone",  # the suite's DLRM case alone
             "results_branch": "benchmarks.results_branch", "quantized_suite": "benchmarks.quantized_suite"}
    for package in ("experiments", "compliance"):
        for module in pkgutil.iter_modules([str(HERE / package)]):
            found[module.name] = f"benchmarks.{package}.{module.name}"
    return found


def _entry_doc(target: str) -> str | None:
    module_name, _, function = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, function).__doc__ if function else module.__doc__


def main(argv: list[str] | None = None) -> int:
    # the compiled host path built before the first timed call (reference_kernels/host.py), so
    # that no figure depends on when a background build finished; REFERENCE_KERNELS_HOST_PATH=off
    # measures the Python path
    os.environ.setdefault("REFERENCE_KERNELS_HOST_PATH", "wait")
    args = sys.argv[1:] if argv is None else argv
    known = commands()
    if not args or args[0] in ("-h", "--help", "list"):
        print(__doc__)
        for name, target in known.items():
            doc = (_entry_doc(target) or "").strip().splitlines()
            print(f"  {name:20s} {doc[0] if doc else ''}")
        return 0
    name, rest = args[0], args[1:]
    if name not in known:
        print(f"unknown command {name!r}; one of: {', '.join(known)}", file=sys.stderr)
        return 2
    module_name, _, function = known[name].partition(":")
    entry = getattr(importlib.import_module(module_name), function or "main")
    sys.argv = [f"python3 -m benchmarks {name}", *rest]  # each main reads its own arguments
    result = entry()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
