"""The tools built on the gate (review, fuzz, zoo, mutate); the gate imports nothing from here."""
