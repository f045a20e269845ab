"""The emitters of plain-vLLM tests and of readable examples."""
