"""The rule specs, data only: ``interface`` (``CheckSpec``, ``CheckConfig``), the static checks',
the upstream stage's and the verify stage's specs (``checks``, ``upstream``, ``verify``), and
``registry``, the one list of them. Below every stage and the rule sets that configure them, so
that no folder of ``compliance`` imports another that imports it back."""
