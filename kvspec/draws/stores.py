"""The draws of a request's saves to the Mooncake store: the lookup draws' setting and prompt
(kvspec/draws/lookups.py:lookups, the same draws the Mooncake store coordinator's lookups use),
the tokens computed by the last save, and where the saves between split them."""

from __future__ import annotations

from hypothesis import strategies as st

from kvspec.draws.lookups import lookups
from kvspec.spec.resolution import scheduler_block_size
from kvspec.spec.stores import StoreCase, StoreSave


@st.composite
def store_cases(draw) -> StoreCase:
    """A prompt of the lookup's hashed tokens; the saves cover its first ``max_length`` tokens
    rounded down to the scheduler block (the worker's ``checkpoint_len``), in one save or split
    at drawn scheduler-block boundaries (a chunked prefill saving after each chunk)."""
    setting, state, max_length = draw(lookups())
    lcm = scheduler_block_size(setting)
    prompt = state.num_hashes * setting.hash_block_size
    saved = max_length // lcm * lcm
    inner = list(range(lcm, saved, lcm))
    splits = sorted(draw(st.sets(st.sampled_from(inner), max_size=3))) if inner else []
    ends = [*splits, saved] if saved else []
    saves = tuple(StoreSave(start, end) for start, end in zip([0, *ends], ends))
    return StoreCase(setting, prompt, saves)
