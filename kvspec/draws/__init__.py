"""The input draws (Hypothesis strategies) and their encoding; they import nothing from the checks."""
