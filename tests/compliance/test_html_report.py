"""The HTML review page without a browser: escaping, order, self-containment (issue 51 item 4).
tests/compliance/test_html_browser.py loads it in Chromium."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from compliance.report.html import page_text
from tests.compliance.review_page import RTL_NAME, SCRIPT_NAME, hostile_tree, review_page


def test_strings_from_the_tree_are_text(tmp_path: Path) -> None:
    page = review_page(hostile_tree(tmp_path), tmp_path / "report.html")
    assert page.count("<script") == 1 and "alert(1)</script>" not in page
    assert html.escape(SCRIPT_NAME) in page
    assert "\u202e" not in page and RTL_NAME.replace("\u202e", "\\u202e") in page


def test_self_contained_and_locked_down(tmp_path: Path) -> None:
    page = review_page(hostile_tree(tmp_path), tmp_path / "report.html")
    assert not re.search(r"<link|<img|<iframe|@import|url\(|\ssrc=", page)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None and "default-src 'none'" in policy.group(1)
    for tag in ("style", "script"):
        block = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.S)
        assert block is not None
        digest = base64.b64encode(hashlib.sha256(block.group(1).encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy.group(1)


def test_kernels_by_category_first_then_findings(tmp_path: Path) -> None:
    page = review_page(hostile_tree(tmp_path), tmp_path / "report.html")
    order = [page.index(marker) for marker in (
        "training/v0.7</code> — MLPerf Training v0.7",       # the rule set at the top
        "https://github.com/mlcommons/training_policies/issues/291",  # its provenance
        'id="filter"',
        "<code>dlrm-embedding</code> <span class=\"badge\">decided by the round",  # the decided category
        "<code>benchmark:bert</code>",
        'id="findings"',
        'id="rules"')]
    assert order == sorted(order)
    # The undeclared gather kernel is put in the policy's category (its name mentions 'gather').
    decided = page[order[3]:order[4]]
    assert "gather\\u202egpj.cu" in decided and "undeclared" in decided
    findings = page[order[5]:order[6]]
    assert "Acme" in findings and "<h3>dlrm</h3>" in findings and "<h3>bert</h3>" in findings
    assert f'{html.escape(str(Path("Acme/benchmarks/bert/implementations/pytorch/attention.cu")))}:1' in findings
    assert '<a href="#rule-undeclared-kernel"><code>undeclared-kernel</code></a>' in findings
    assert "fix: Declare the kernel" in findings
    assert 'id="rule-undeclared-kernel"' in page[order[6]:]


_FORBIDDEN = set("<>\"'") | {chr(c) for c in (0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068,
                                               0x2069, 0x200E, 0x200F, 0x061C)}


@given(st.text())
def test_escaped_text_holds_no_markup_or_direction_control(value: str) -> None:
    escaped = page_text(value)
    assert not set(escaped) & _FORBIDDEN
    escaped.encode("utf-8")  # lone surrogates escaped too
    # What is shown is the value, with controls written as escapes: plain characters survive.
    plain = "".join(c for c in value if c.isalnum())
    assert all(c in html.unescape(escaped) for c in plain)
