"""Reporters: the same findings rendered as text, JSON, JUnit XML, SARIF or an HTML review page.

``interface.py`` defines the reporter signature; ``FORMATS`` maps a
``--format`` name to its reporter.
"""

from __future__ import annotations

from compliance.report.html import render_html
from compliance.report.interface import Reporter
from compliance.report.json_report import render_json
from compliance.report.junit import render_junit
from compliance.report.sarif import render_sarif
from compliance.report.text import render_text

FORMATS: dict[str, Reporter] = {
    "text": render_text, "json": render_json, "junit": render_junit, "sarif": render_sarif, "html": render_html,
}
