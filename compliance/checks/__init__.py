"""Checks: ``interface`` (the registry), the static-check modules, and ``builtin``.

This package's ``__init__`` imports nothing, so ``compliance.context`` and the
check modules can import each other's light parts in any order;
``compliance.checks.builtin`` registers everything.
"""
