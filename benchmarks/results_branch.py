"""Store result files on the ``bench-results`` branch: ``results_branch FILE_OR_DIR... -m MESSAGE``.

Raw benchmark results (suite JSONs, logs, charts, profiler dumps) do not live in the source tree;
they live on ``bench-results``, an orphan branch of this repository with the same paths
(``benchmarks/results/<file>``), so a path a document cites is read with
``git show bench-results:benchmarks/results/<file>`` or browsed with
``git worktree add ../bench-results bench-results``. This command commits files onto that
branch without touching the working tree or the index: each FILE goes to
``benchmarks/results/<its name>``, each directory's files keep their paths below the directory's
name. It is a local branch: push it along with main (``git push origin main bench-results``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BRANCH = "bench-results"
PREFIX = "benchmarks/results"
README = f"""# {BRANCH}: the raw benchmark results

An orphan branch: no source code, only what the benchmarks and experiments wrote (suite JSONs,
logs, charts, profiler output, GPU test logs), at the paths the documents cite:
`{PREFIX}/<file>`. `{PREFIX}/INDEX.md` says for each file the commit, the device and the
command. Read one file with `git show {BRANCH}:{PREFIX}/<file>`, or check the branch out beside
the source with `git worktree add ../{BRANCH} {BRANCH}`. Add files with
`python3 -m benchmarks results_branch FILE... -m MESSAGE` from the source tree (main); the
branch is pushed along with main.

Until it was moved here (issue 52), the same files were tracked under `{PREFIX}/` on main; the
commits that wrote them are in main's history.
"""


class ResultsBranchError(Exception):
    """Git refused, or a named file does not exist."""


def _git(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, env=env, input=stdin, check=False)
    if done.returncode != 0:
        raise ResultsBranchError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _branch_head() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{BRANCH}"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def _entries(paths: list[Path]) -> list[tuple[Path, str]]:
    """Each file to store and its path on the branch."""
    entries = []
    for path in paths:
        if path.is_dir():
            entries += [(f, f"{PREFIX}/{path.name}/{f.relative_to(path).as_posix()}")
                        for f in sorted(path.rglob("*")) if f.is_file()]
        elif path.is_file():
            entries.append((path, f"{PREFIX}/{path.name}"))
        else:
            raise ResultsBranchError(f"{path}: no such file or directory")
    return entries


def store(paths: list[Path], message: str) -> str:
    """Commit the files onto the branch (created when missing, with its README); the new commit."""
    head = _branch_head()
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        _git("read-tree", *([head] if head else ["--empty"]), env=env)
        files = _entries(paths)
        if head is None:
            readme = Path(scratch) / "README.md"
            readme.write_text(README)
            files.append((readme, "README.md"))
        for source, target in files:
            blob = _git("hash-object", "-w", "--", str(source))
            _git("update-index", "--add", "--cacheinfo", f"100644,{blob},{target}", env=env)
        tree = _git("write-tree", env=env)
    commit = _git("commit-tree", tree, *(["-p", head] if head else []), stdin=message)
    _git("update-ref", f"refs/heads/{BRANCH}", commit, *([head] if head else [""]))
    return commit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="result files or directories")
    parser.add_argument("-m", "--message", required=True, help="what was measured, on which card, at which commit")
    args = parser.parse_args()
    try:
        commit = store(args.paths, args.message)
    except ResultsBranchError as exc:
        print(f"results_branch: {exc}", file=sys.stderr)
        return 1
    print(f"{BRANCH} at {commit[:12]}: {len(args.paths)} path(s) stored; push it along with main")
    return 0


if __name__ == "__main__":
    sys.exit(main())
