"""A submission tree whose file names are hostile to an HTML page, and its review page (shared by
the page's unit tests and its browser test)."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from compliance.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ORG = REPO / "submissions_example" / "Acme"
IMPLEMENTATION = Path("Acme/benchmarks/dlrm/implementations/pytorch")
KERNEL = "__global__ void scratch_kernel(float* x) { x[threadIdx.x] = 0.f; }\n"
SCRIPT_NAME = "<script>alert(1)</script>.cu"
"""A path (a directory ``<script>alert(1)<`` holding ``script>.cu``) that reads as a script tag."""
RTL_NAME = "gather\u202egpj.cu"
"""A file name with U+202E (right-to-left override): shown raw it would read ``gather`` + ``uc.jpg``."""
ROUND = "training/v0.7"


def hostile_tree(parent: Path) -> Path:
    """The example organization plus undeclared kernels under hostile names, and one in another
    benchmark (so that the page has a policy category and another group)."""
    root = parent / "round"
    shutil.copytree(EXAMPLE_ORG, root / "Acme")
    implementation = root / IMPLEMENTATION
    (implementation / "<script>alert(1)<").mkdir()
    (implementation / "<script>alert(1)<" / "script>.cu").write_text(KERNEL)
    (implementation / RTL_NAME).write_text(KERNEL)
    bert = root / "Acme" / "benchmarks" / "bert" / "implementations" / "pytorch"
    bert.mkdir(parents=True)
    (bert / "attention.cu").write_text(KERNEL)
    return root


def review_page(tree: Path, output: Path) -> str:
    """``compliance check TREE --rules training/v0.7 --format html --output OUTPUT``: the page's text."""
    result = CliRunner().invoke(cli, ["check", str(tree), "--rules", ROUND, "--format", "html", "--output",
                                      str(output)])
    assert result.exit_code in (0, 1), result.output
    return output.read_text(encoding="utf-8")
