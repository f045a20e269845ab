"""The draws of a request's store steps on the OffloadingConnector: the offloading lookups'
setting and prompt (kvspec/draws/offloading.py:offload_cases), the tokens computed by the last
step, where the steps between split them (a chunked prefill's token budget, any token), and how
a request that stops mid-prefill ends."""

from __future__ import annotations

from hypothesis import strategies as st

from kvspec.draws.offloading import offload_cases
from kvspec.spec.offloading_stores import OffloadStoreCase


@st.composite
def offload_store_cases(draw) -> OffloadStoreCase:
    """One to four steps computing the first tokens of the lookup draw's prompt; a request that
    stops mid-prefill ends aborted or in error, the two ways vLLM's scheduler ends one there."""
    setting, _, num_tokens, _ = draw(offload_cases())
    if num_tokens == 0:
        return OffloadStoreCase(setting, 0, ())
    computed = draw(st.integers(1, num_tokens))
    splits = sorted(draw(st.sets(st.integers(1, computed - 1), max_size=3))) if computed > 1 else []
    ends = [*splits, computed]
    ends_in_error = computed < num_tokens and draw(st.booleans())
    return OffloadStoreCase(setting, num_tokens, tuple(zip([0, *ends], ends)), ends_in_error)
