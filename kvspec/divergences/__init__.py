"""The known divergences: vLLM behaviour that is safe but not the best the spec allows."""
