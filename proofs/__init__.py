"""Z3 proofs of kvspec's hit-length and grouping rules; see proofs/runner.py. Pure: they import
nothing from impl/ or the harness; ``kvspec prove`` (kvspec/tools/prove.py) replays their
counterexamples on real vLLM."""
