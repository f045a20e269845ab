"""The rules' judges as data: every violation is an (invariant, detail) pair."""
