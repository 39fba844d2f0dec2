"""Rule ids of the ``--upstream`` stage (listed in ``compliance.rulespecs.registry``).

Importing this module imports no git code: ``compliance rules explain`` and
rule-set validation see these ids while a plain static check never loads
gitpython.
"""

from __future__ import annotations

from compliance.rulespecs.interface import CheckSpec

STAGE = "upstream"

UNREACHABLE = CheckSpec(
    id="upstream-unreachable", title="Upstream repository unreachable", default_level="error",
    stage=STAGE,
    doc="`compliance check --upstream` could not fetch the upstream repository: the host did not "
        "answer, the name did not resolve, the repository does not exist there, or a git operation "
        "ran past its time limit. The link is unproven, so the kernel is not shown to be upstream.",
    hint="Check the repository URL and that it is public; if the host is only slow, raise the "
         "time limit; behind a firewall, fill the cache elsewhere and use --offline.",
    passing="repository: https://github.com/acme/kernels (public, reachable)",
    failing="repository: https://github.com/acme/kernels-typo (no such repository)",
)
AUTH = CheckSpec(
    id="upstream-auth-required", title="Upstream repository requires authentication",
    default_level="error", stage=STAGE,
    doc="The host asked for credentials. The tool never prompts and uses no credential helper, "
        "because an upstreamed kernel must be available to others: a repository that needs a login "
        "is not.",
    hint="Make the repository (or a mirror of the commit) public and point the manifest at it.",
    passing="repository: https://github.com/acme/kernels (public)",
    failing="repository: https://github.com/acme/private-kernels (asks for a username)",
)
CACHE_CORRUPT = CheckSpec(
    id="upstream-cache-corrupt", title="Upstream cache is corrupt", default_level="error",
    stage=STAGE,
    doc="The cached bare copy of the upstream repository cannot be read (not a git repository, "
        "damaged objects or packs). Nothing it says can be trusted, so the link is unproven. The "
        "tool never deletes a cache on its own.",
    hint="Delete the cache directory named in the message and run again without --offline.",
    passing="a cache filled by an earlier `compliance check --upstream`",
    failing="a cache directory whose objects were truncated by a full disk",
)
NOT_CACHED = CheckSpec(
    id="upstream-not-cached", title="Upstream not in the offline cache", default_level="error",
    stage=STAGE,
    doc="With --offline the tool uses only the cache, and the cache does not hold the repository "
        "or the pinned commit, so the link cannot be proven in this run.",
    hint="Run once with --upstream and without --offline (or copy a filled cache) to fill the "
         "cache, then run offline again.",
    passing="--offline after an online --upstream run with the same --upstream-cache",
    failing="--offline with an empty --upstream-cache",
)
COMMIT_UNKNOWN = CheckSpec(
    id="upstream-commit-unknown", title="Upstream commit does not exist", default_level="error",
    stage=STAGE,
    doc="The repository was reached but has no commit with the pinned hash (nor, when the rule "
        "set does not require a hash, a branch or tag of that name). The commit was never pushed, "
        "was rewritten away, or the hash has a typo.",
    hint="Push the commit and pin the hash `git rev-parse HEAD` prints in the upstream repository.",
    passing="commit: <hash printed by git rev-parse HEAD after pushing>",
    failing="commit: 0000000000000000000000000000000000000000",
)
COMMIT_UNMERGED = CheckSpec(
    id="upstream-commit-unmerged", title="Upstream commit not on any branch or tag",
    default_level="error", stage=STAGE,
    doc="The commit exists upstream but no branch or tag contains it: typically the head of an "
        "unmerged pull request. Upstreamed means merged and available to others, so this falls "
        "short even though the code can be fetched.",
    hint="Get the pull request merged (or tag the commit) and pin a commit that a branch or tag "
         "contains.",
    passing="a commit on main, or one a release tag points at",
    failing="the head commit of an open pull request (refs/pull/N/head only)",
)
PATH_MISSING = CheckSpec(
    id="upstream-path-missing", title="Declared upstream path not at the commit",
    default_level="error", stage=STAGE,
    doc="The pinned commit exists but has no file at the declared upstream path (or has a "
        "directory there). For a vendored tree: the declared upstream directory does not exist at "
        "the commit.",
    hint="Fix `upstream.paths` (one path per source, same order) to where the file lives in the "
         "upstream repository at that commit.",
    passing="paths: [csrc/embedding_bag.cu] and the commit has csrc/embedding_bag.cu",
    failing="paths: [src/embedding_bag.cu] when the file is at csrc/embedding_bag.cu",
)
CONTENT_DIFFERS = CheckSpec(
    id="upstream-content-differs", title="Submitted source differs from upstream",
    default_level="error", stage=STAGE,
    doc="The submitted source is not byte-identical to the upstream file at the pinned commit: "
        "their git blob hashes differ. The finding gives both blob hashes and how many lines were "
        "added and removed relative to upstream. No normalization is applied: line endings and "
        "whitespace count (the message says when they are the only difference).",
    hint="Submit exactly the upstream file, or push your changes upstream and pin that commit.",
    passing="local blob == upstream blob (git hash-object of the file equals the tree entry)",
    failing="the submitted file has an extra line the upstream file lacks",
)
VERIFIED = CheckSpec(
    id="upstream-verified", title="Kernel source proven upstream", default_level="info",
    stage=STAGE,
    doc="Every source of the kernel is byte-identical to its declared path at a commit that a "
        "branch or tag of the upstream repository contains. Reported at info level so a report "
        "shows which links were proven, not just that nothing failed.",
    hint="Nothing to fix.",
    passing="blob hashes equal and the commit is on a branch or tag",
    failing="(never fails; the shortfalls have their own rule ids)",
)
VENDORED_DIFFERS = CheckSpec(
    id="upstream-vendored-differs", title="Vendored files not verbatim upstream",
    default_level="error", stage=STAGE,
    doc="A declared vendored tree is checked file by file against the declared upstream "
        "repository and commit by git blob hash (one `git cat-file --batch-check` for the whole "
        "tree). Native files that are modified, or absent upstream, are not a framework copy: they "
        "are custom code and must be declared as kernels. The finding counts the verbatim files and "
        "lists the others.",
    hint="Restore the listed files to their upstream content, or declare them as kernels in the "
         "manifest (and upstream them).",
    passing="every .cu under third_party/apex equals apex at the declared commit",
    failing="third_party/apex/csrc/fused_dense.cu edited after copying",
)
VENDORED_VERIFIED = CheckSpec(
    id="upstream-vendored-verified", title="Vendored tree verbatim upstream", default_level="info",
    stage=STAGE,
    doc="Every native file of a declared vendored tree is byte-identical to the declared upstream "
        "directory at the declared commit (which a branch or tag contains). Reported at info level "
        "with the file count.",
    hint="Nothing to fix.",
    passing="3000 of 3000 native files verbatim upstream",
    failing="(never fails; modified files are reported by upstream-vendored-differs)",
)
VENDORED_IDENTIFIED = CheckSpec(
    id="upstream-vendored-identified", title="Upstream commit of a vendored tree identified",
    default_level="info", stage=STAGE,
    doc="With --upstream, every vendored tree whose upstream is known (a catalogued project such as "
        "NCCL, or a `vendored:` declaration) is compared by git blob hash with every commit of that "
        "repository (`compliance vendored identify`): the finding names the commit the copy is "
        "identical to, or the closest commit and which files are modified (with diff sizes), added "
        "or removed; or says that no commit matches, or why the repository could not be read. It "
        "turns hundreds of files into one line such as \"NCCL at v2.18.3 plus 2 modified files\".",
    hint="Declare the tree under `vendored:` with the identified commit; declare modified or added "
         "native files as kernels.",
    passing="third_party/nccl identical to NVIDIA/nccl at v2.18.3-1",
    failing="(never fails; information for reviewers)",
)
