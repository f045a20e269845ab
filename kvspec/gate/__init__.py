"""The gate's checks: one module per check, one registry (registry.py), one call signature."""
