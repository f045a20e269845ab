"""Z3 proofs of kvspec's hit-length and grouping rules (issue #4); see proofs/runner.py."""

from kvspec.proofs.core import ProofResult
from kvspec.proofs.runner import main, run_proofs

__all__ = ["ProofResult", "main", "run_proofs"]
