"""kvspec's harness: the gate's checks and the tools built on them (see README's layout)."""

from kvspec.draws.determinism import pin_constant_pool

# Before anything draws: every kvspec command, test and fuzz target imports this package first.
pin_constant_pool()
