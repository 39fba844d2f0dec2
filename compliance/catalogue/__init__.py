"""Data shipped with the package: the catalogue of upstream projects that submissions copy."""
