"""Build step for the wheel: the rule sets live in ``rules/`` at the top of the repository (what a
working group reviews in a pull request), and the wheel ships them inside the package as
``compliance/rulesets/<usage>/<name>.yaml`` so an installed ``compliance`` finds them without the
repository. Everything else is declared in pyproject.toml; ``compliance.ruleset.shipped_rules_dir``
looks in the package first and then beside it (a source checkout or an editable install)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RULES_SOURCE = Path(__file__).resolve().parent / "rules"
RULES_IN_PACKAGE = Path("compliance") / "rulesets"


class BuildPyWithRules(build_py):
    """setuptools' build_py, plus a copy of ``rules/*/*.yaml`` into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads rules/ in place
            return
        for source in sorted(RULES_SOURCE.glob("*/*.yaml")):
            target = Path(self.build_lib) / RULES_IN_PACKAGE / source.parent.name / source.name
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))


setup(cmdclass={"build_py": BuildPyWithRules})
