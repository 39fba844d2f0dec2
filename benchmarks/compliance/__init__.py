"""Speed checks of ``compliance check`` on synthetic trees (CPU only)."""
