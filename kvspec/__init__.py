"""kvspec's harness: the gate's checks and the tools built on them (see README's layout)."""

from kvspec.tools import interrupts

# A command takes over SIGINT and SIGTERM before its first heavy import (Hypothesis alone takes a
# quarter of a second): a signal while it still loads exits 130 or 143 like any other, not raw.
if interrupts.started_as_the_command():
    interrupts.install()

from kvspec.draws.determinism import pin_constant_pool  # noqa: E402 - after the signals, on purpose

# Before anything draws: every kvspec command, test and fuzz target imports this package first.
pin_constant_pool()
