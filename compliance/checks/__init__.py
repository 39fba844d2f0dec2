"""Checks: ``interface`` (spec and stage types), ``registry`` (every spec, listed
once), the static-check modules, and ``builtin`` (the static stage).

This package's ``__init__`` imports nothing, so ``compliance.context`` and the
check modules can import each other's light parts in any order.
"""
