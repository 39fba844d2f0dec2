"""Click layer: one module per command group, each a thin wrapper over the core."""
