"""The round cannot be chosen leniently behind the reviewer's back.

When the rule set comes from the tree itself (a manifest's ``ruleset:``, a README
or a file name naming the round), the submitter chose it. If a stricter round
(``compliance.detect.strictness``: more checks at error level, read from the rule
data) also fits the tree's layout and benchmark names, the engine checks the tree
under that round too and this finding names it with its verdict, so the reviewer
sees both. CI should name the round with ``--rules``; then no finding is made.
"""

from __future__ import annotations

from compliance.checks.interface import CheckSpec

STRICTER_ROUND = CheckSpec(
    id="ruleset-stricter-round-fits", title="A stricter round also fits the tree", default_level="warning",
    doc="The rule set was named by the tree itself (a kernel manifest's `ruleset:`, a README or a "
        "file name at the root), and a stricter round whose benchmarks the tree also fits exists "
        "(stricter: more checks at error level in its rule data, e.g. undeclared kernels as "
        "errors). The tree was checked under that round as well; this finding gives its verdict. "
        "The round a submission is judged by is the reviewer's choice, not the submitter's.",
    hint="Name the round on the command line (`compliance check --rules training/v0.7 ...`); in CI "
         "always pass --rules.",
    passing="compliance check --rules training/v1.0 tree/",
    failing="a DLRM-only tree whose manifest says ruleset: training/v1.0 (training/v0.7 also fits)",
)
