"""The draws of the SimpleCPUOffload connector's bookkeeping (spec/simple_offload_pins.py): a
pool holding every group's whole prefix, or one as the lookup draws make it
(kvspec/draws/simple_offload.py), its entries in a drawn eviction order, one to three requests
over one token sequence, and the scheduler's calls for them interleaved in an order it can make:
each request is looked up (again on a retry) while it waits, then admitted or aborted; an
admitted one's load is reported done; stores press the pool in between. Every case ends with no
request waiting and no load in flight, where no pin may be left."""

from __future__ import annotations

from hypothesis import strategies as st

from kvspec.draws.simple_offload import simple_offload_pools
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.resolution import scheduler_block_size
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.simple_offload_pins import Admit, Finish, LoadDone, Lookup, PinsCase, Press


@st.composite
def pins_cases(draw) -> PinsCase:
    setting, cpu, lazy = draw(simple_offload_pools())
    unit, block = setting.hash_block_size, scheduler_block_size(setting)
    if draw(st.integers(0, 2)):
        # Two times in three every group holds the whole prefix, over three scheduler blocks
        # where the pool stays small: most lookups match, past a local prefix held in the pool.
        cpu = CacheState.full_prefix(len(setting.groups), min(max(cpu.num_hashes, 3 * block // unit), 48))
    order = tuple(draw(st.permutations(sorted(cpu.cached))))
    most = max(2, cpu.num_hashes * unit + unit - 1)
    # The whole prompt the pool holds half the time: a request shorter than a block matches nothing.
    tokens = tuple(draw(st.lists(st.one_of(st.just(most), st.integers(2, most)), min_size=1, max_size=3)))

    def lookup(r: int) -> Lookup:
        # Past a local prefix two times in three (the scheduler presents its local hit on a
        # scheduler block, leaving the last token); one lookup in five skips external reads.
        blocks = (tokens[r] - 1) // block
        local = draw(st.integers(1, blocks)) * block if blocks and draw(st.integers(0, 2)) else 0
        return Lookup(r, local, skips_external_reads=draw(st.integers(0, 4)) == 0)

    scripts = []
    for r in range(len(tokens)):
        # Each request: a lookup, a retry one time in three, then admitted three times in four
        # (and its load reported done), or aborted while it waits.
        script = [lookup(r) for _ in range(1 + (draw(st.integers(0, 2)) == 0))]
        script += [Admit(r), LoadDone(r)] if draw(st.integers(0, 3)) else [Finish(r)]
        scripts.append(script)
    ops = []
    while any(scripts):
        if draw(st.integers(0, 5)) == 0:  # a store presses the pool between two calls
            ops.append(Press(draw(st.integers(1, len(cpu.cached) + 2))))
        r = draw(st.sampled_from([r for r, script in enumerate(scripts) if script]))
        ops.append(scripts[r].pop(0))
    return PinsCase(setting, cpu, order, lazy, tokens, tuple(ops))


_FULL_4 = LookupSetting((CacheGroup(Kind.FULL, 4),), 4)
_HELD = CacheState(4, frozenset((0, j) for j in range(4)))  # tokens [0, 16)
_FRONT_FIRST = tuple((0, j) for j in range(4))


def _fixed(lazy: bool, *ops) -> PinsCase:
    return PinsCase(_FULL_4, _HELD, _FRONT_FIRST, lazy, (16, 16), tuple(ops))


# Run first, whatever the budget, eager then lazy: a retried lookup, then an admission that loads
# and its load done; a lookup that skips external reads; an admission past a local prefix of 8
# (eager: its CPU copy, entries 0-1, is refreshed); a retry past no local prefix that skips
# external reads before the admission (nothing to refresh); a press that would evict everything
# unpinned while a match waits.
FIXED_PINS_CASES = tuple(case for lazy in (False, True) for case in (
    _fixed(lazy, Lookup(0, 0), Lookup(0, 0), Admit(0), LoadDone(0), Lookup(1, 0, True), Admit(1)),
    _fixed(lazy, Lookup(0, 8), Admit(0), LoadDone(0)),
    _fixed(lazy, Lookup(0, 8), Lookup(0, 0, True), Admit(0)),
    _fixed(lazy, Lookup(0, 0), Press(6), Admit(0), Press(6), LoadDone(0)),
))
