"""Bare git caches of upstream repositories, driven through gitpython.

Every git process gets a time limit (gitpython's ``kill_after_timeout``, which
also kills the transport helpers it spawned), never prompts (no terminal
prompt, no askpass program, no credential helper, ssh in batch mode) and runs
with ``gc.auto=0`` so a check never starts a background repack. Errors are
classified from git's stderr into the few failure kinds the findings report.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from urllib.parse import urlparse

import git

from compliance.errors import InputError
from compliance.upstream.options import NETWORK_TIMEOUT_S

LOCAL_TIMEOUT_S = 60.0
"""Default limit for a git operation on the cache."""
FETCHED_MARKER = "compliance-fetched-at"
"""File in a cached repository holding the time of its last branch/tag fetch."""
PIN_NAMESPACE = "refs/compliance/pinned"
"""Where commits fetched by hash are kept (never counted as branches or tags)."""

_CONFIG = ("credential.helper=", "core.askPass=", "gc.auto=0", "maintenance.auto=false",
           "protocol.version=2", "fetch.recurseSubmodules=false", "advice.detachedHead=false")

_AUTH = re.compile(r"authentication failed|could not read (username|password)|terminal prompts disabled"
                   r"|permission denied \(publickey|returned error: 40[13]|invalid username or password"
                   r"|host key verification failed|authentication required", re.IGNORECASE)
_NOT_FOUND = re.compile(r"not our ref|couldn't find remote ref|no such remote ref|unadvertised object"
                        r"|upload-pack: not our ref|did not send all necessary objects", re.IGNORECASE)
_CORRUPT = re.compile(r"corrupt|bad object|inflate|invalid sha1 pointer|does not point to a valid object"
                      r"|bad packed object|packfile .* cannot be accessed|not a git repository"
                      r"|index file .* too small|bad signature|missing object"
                      r"|unable to read [0-9a-f]{40}", re.IGNORECASE)
_TIMEOUT = re.compile(r"did not complete in [\d.]+ secs", re.IGNORECASE)


class FailureKind(str, Enum):
    """Why a repository or commit could not be used."""

    UNREACHABLE = "unreachable"
    AUTH = "auth-required"
    CORRUPT = "cache-corrupt"
    NOT_CACHED = "not-cached"
    NOT_FOUND = "not-found"


class GitFailure(Exception):
    """A git operation failed in a way a finding reports."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        """The failure kind."""
        self.message = message
        """One sentence for the finding."""


def _stderr_tail(stderr: str, limit: int = 300) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = " | ".join(lines[-3:])
    return text if len(text) <= limit else "…" + text[-limit:]


def classify(stderr: str, network: bool) -> FailureKind:
    """Failure kind of a git error, from its stderr and whether it talked to a remote."""
    if _TIMEOUT.search(stderr) or stderr.startswith("cannot run git"):
        return FailureKind.UNREACHABLE
    if not network or _CORRUPT.search(stderr):
        return FailureKind.CORRUPT
    if _AUTH.search(stderr):
        return FailureKind.AUTH
    if _NOT_FOUND.search(stderr):
        return FailureKind.NOT_FOUND
    return FailureKind.UNREACHABLE


def git_environment(network_timeout_s: float) -> dict[str, str]:
    """Environment for every git process: nothing may prompt or wait forever."""
    connect = max(1, int(min(network_timeout_s, 20)))
    return {
        "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": "", "GCM_INTERACTIVE": "never",
        "GIT_SSH_COMMAND": f"ssh -o BatchMode=yes -o ConnectTimeout={connect}",
        "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
        "GIT_HTTP_LOW_SPEED_TIME": str(max(1, int(min(network_timeout_s, 30)))),
    }


@dataclass(frozen=True)
class ObjectInfo:
    """One line of ``git cat-file --batch-check``."""

    sha: str
    """Object id."""
    type: str
    """blob, tree, commit or tag."""
    size: int
    """Bytes."""


@dataclass(frozen=True)
class GitRunner:
    """Runs git on one bare repository with limits and without prompts."""

    git_dir: Path
    """The bare repository."""
    network_timeout_s: float = NETWORK_TIMEOUT_S
    """Limit for operations that talk to a remote."""
    local_timeout_s: float = LOCAL_TIMEOUT_S
    """Limit for operations on the cache only."""

    def run(self, *args: str, network: bool = False, stdin: bytes | None = None) -> bytes:
        """stdout of ``git <args>``; raises ``GitFailure`` on any failure or timeout."""
        status, out, err = self.run_status(*args, network=network, stdin=stdin)
        if status == 0:
            return out
        if _TIMEOUT.search(err):
            limit = self.network_timeout_s if network else self.local_timeout_s
            raise GitFailure(FailureKind.UNREACHABLE, f"git {args[0]} did not finish within the {limit:g}s "
                             "time limit (stopped)")
        detail = _stderr_tail(err) or f"exit status {status}"
        raise GitFailure(classify(err, network), f"git {args[0]} failed: {detail}")

    def run_status(self, *args: str, network: bool = False,
                   stdin: bytes | None = None) -> tuple[int, bytes, str]:
        """(exit status, stdout, stderr) of ``git <args>``; a timeout reads as a failure."""
        config = [item for pair in _CONFIG for item in ("-c", pair)]
        command = ["git", *config, f"--git-dir={self.git_dir}", *args]
        timeout = self.network_timeout_s if network else self.local_timeout_s
        with tempfile.TemporaryFile() as handle:
            handle.write(stdin or b"")
            handle.seek(0)
            try:
                status, out, err = git.Git().execute(
                    command, istream=handle, with_extended_output=True, with_exceptions=False,
                    kill_after_timeout=None if sys.platform == "win32" else timeout,
                    stdout_as_string=False, strip_newline_in_stdout=False,
                    env=git_environment(self.network_timeout_s))
            except (OSError, git.GitCommandNotFound) as exc:
                return 127, b"", f"cannot run git: {exc}"
        return int(status), bytes(out or b""), str(err or "")


def cache_key(url: str) -> str:
    """Directory name (relative to the cache root) for the repository at ``url``."""
    parsed = urlparse(url)
    host = (parsed.hostname or "local").lower()
    path = (parsed.path if parsed.scheme else url).strip("/").removesuffix(".git")
    readable = re.sub(r"[^a-z0-9._-]+", "-", path.lower()).strip("-")[-60:] or "repository"
    normalized = f"{host}/{path}".lower() if parsed.hostname else os.path.abspath(path)
    digest = hashlib.sha256(normalized.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^a-z0-9.-]+', '-', host)}/{readable}-{digest}.git"


@dataclass(frozen=True)
class CachedRepository:
    """The cached bare copy of one upstream repository."""

    url: str
    """Repository URL as the manifest declares it."""
    fetch_url: str
    """Where to fetch from (the URL, or a mirror of it)."""
    runner: GitRunner
    """Git on the cached copy."""

    @property
    def git_dir(self) -> Path:
        """The bare repository directory."""
        return self.runner.git_dir

    def exists(self) -> bool:
        """True when the cache has an entry (valid or not) for this repository."""
        return self.git_dir.exists()

    def validate(self) -> None:
        """Raise ``GitFailure(CORRUPT)`` unless the entry is a readable bare repository."""
        status, out, err = self.runner.run_status("rev-parse", "--is-bare-repository")
        if status != 0 or out.strip() != b"true":
            detail = _stderr_tail(err) or "not a bare git repository"
            raise GitFailure(FailureKind.CORRUPT, f"cache {self.git_dir} is unusable: {detail}")

    def create(self) -> None:
        """Create the bare repository (parents included); an unwritable cache is an input error."""
        try:
            self.git_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the upstream cache entry: {exc.strerror or exc}",
                             self.git_dir) from exc
        self.runner.run("init", "--bare", "--quiet", str(self.git_dir))

    def has_commit(self, sha: str) -> bool:
        """True when the cache holds commit ``sha`` (damaged objects raise ``GitFailure``)."""
        status, out, err = self.runner.run_status("cat-file", "-t", sha)
        if status == 0:
            return out.strip() == b"commit"
        if _CORRUPT.search(err):
            raise GitFailure(FailureKind.CORRUPT, f"cache {self.git_dir}: {_stderr_tail(err)}")
        return False

    def resolve(self, name: str) -> str | None:
        """Full hash of the commit ``name`` (hash, branch or tag) names in the cache, or None."""
        status, out, _ = self.runner.run_status("rev-parse", "--verify", "--quiet", "--end-of-options",
                                                f"{name}^{{commit}}")
        return out.decode().strip() if status == 0 else None

    def containing_ref(self, sha: str) -> str | None:
        """A branch or tag (full ref name) whose history contains ``sha``, or None."""
        out = self.runner.run("for-each-ref", "--count=1", f"--contains={sha}", "--format=%(refname)",
                              "refs/heads", "refs/tags")
        return out.decode().strip() or None

    def _fetch(self, *refspecs: str, prune: bool = False) -> None:
        options = ["--quiet", "--no-tags", "--no-write-fetch-head", *(["--prune"] if prune else [])]
        try:
            self.runner.run("fetch", *options, "--", self.fetch_url, *refspecs, network=True)
        except GitFailure as exc:
            via = f" (via mirror {self.fetch_url})" if self.fetch_url != self.url else ""
            raise GitFailure(exc.kind, f"fetching {self.url}{via}: {exc.message}") from exc

    def fetch_refs(self) -> None:
        """Fetch every branch and tag (pruning deleted ones) and record when."""
        self._fetch("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", prune=True)
        try:
            (self.git_dir / FETCHED_MARKER).write_text(datetime.now(timezone.utc).isoformat(timespec="seconds"))
        except OSError as exc:
            raise InputError(f"cannot write to the upstream cache: {exc.strerror or exc}", self.git_dir) from exc

    def fetch_commit(self, sha: str) -> None:
        """Fetch one commit by hash (e.g. an unmerged pull request head) and pin it in the cache."""
        self._fetch(f"{sha}:{PIN_NAMESPACE}/{sha}")

    def fetched_at(self) -> str | None:
        """When branches and tags were last fetched (ISO time), if ever."""
        try:
            return (self.git_dir / FETCHED_MARKER).read_text().strip() or None
        except OSError:
            return None

    def batch_check(self, specs: list[str | None]) -> list[ObjectInfo | None]:
        """``git cat-file --batch-check`` of ``<rev>:<path>`` specs, in order (None: missing).

        A None spec (a path git cannot be asked about, see ``askable_path``) answers None
        without asking git.
        """
        asked = [s for s in specs if s is not None]
        if not asked:
            return [None] * len(specs)
        if any("\n" in spec or "\0" in spec for spec in asked):
            raise ValueError("object specs cannot contain newlines or NUL")
        stdin = "".join(f"{s}\n" for s in asked).encode("utf-8", "surrogateescape")
        out = self.runner.run("cat-file", "--batch-check", stdin=stdin)
        lines = out.decode("utf-8", "surrogateescape").splitlines()
        if len(lines) != len(asked):
            raise GitFailure(FailureKind.CORRUPT, f"cache {self.git_dir}: cat-file answered {len(lines)} "
                             f"lines for {len(asked)} objects")
        answers = iter(_object_info(line) for line in lines)
        return [None if s is None else next(answers) for s in specs]

    def blob(self, sha: str) -> bytes:
        """Content of blob ``sha``."""
        return self.runner.run("cat-file", "blob", sha)


def askable_path(path: str) -> bool:
    """True when ``path`` can name a file inside a repository for ``<rev>:<path>``.

    Git refuses the whole batch with a fatal error for a path that climbs out
    (``../x``), which would read as a damaged cache; a newline or NUL would split
    or cut the request. Such paths name nothing in the repository.
    """
    if not path or any(c in path for c in "\n\r\0"):
        return False
    return ".." not in path.split("/")


def _object_info(line: str) -> ObjectInfo | None:
    parts = line.rsplit(" ", 2)
    if len(parts) == 3 and parts[2].isdigit() and parts[1] in ("blob", "tree", "commit", "tag"):
        return ObjectInfo(parts[0], parts[1], int(parts[2]))
    return None
