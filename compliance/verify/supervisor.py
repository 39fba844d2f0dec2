"""The kernel process's parent: ``python -I -S supervisor.py [--preload LIB] PROGRAM ARGS...`` (standard
library only).

The kernel's code can signal its parent (``kill(getppid(), SIGSTOP)``, ``SIGKILL``); that parent is
this small process, not the verifier, so such a signal stops or kills only the supervisor while the
verifier keeps its deadlines, kills every descendant at the end and writes its report. It starts the
program (with ``LIB``, the verifier's probe, preloaded into it alone), waits for it and exits with its
status (128 + the signal number when a signal ended it).
"""

import os
import sys


def main(argv: list[str]) -> int:
    """Run ``argv`` as a child and return its status."""
    env = dict(os.environ)
    if argv[:1] == ["--preload"]:
        env["LD_PRELOAD"] = argv[1]
        argv = argv[2:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    os.closerange(3, 1 << 16)  # the pipes are the child's: a stopped supervisor must not hold them open
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
