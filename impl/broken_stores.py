"""A deliberately broken Mooncake store side, to prove that the store-sides check bites.

``mamba_states_put_positionally`` makes ``MooncakeStoreCoordinator.store_mask`` stop excluding
Mamba groups: a save then puts a Mamba group's blocks by position, as if its table held the state
at every block end. An align-mode Mamba table does not (interior states are nulled or freed,
speculative decoding relocates state blocks in place), so the store would write a null, freed or
speculative state under a valid prefix hash, and a later hit would resume from it: a store that
puts a block it does not hold. The patch is vLLM's own function recompiled with one exact edit
(impl/patching.py); impl/broken.py registers it as a BrokenVariant with the fields below.
"""

from __future__ import annotations

from kvspec.gate.names import Check
from kvspec.impl.patching import Undo, edit
from kvspec.impl.vllm_symbols import MOONCAKE_STORE_MASK, OFFLOAD_STORABLE_CHUNKS
from kvspec.spec.offloading_stores import OFFLOAD_STORES_ONLY_COMPUTED_CHUNKS
from kvspec.spec.stores import MAMBA_STATES_BY_HANDOFF

NAME = "store-puts-mamba-state-positionally"
UPSTREAM = "none reported: a plausible store-side bug, store_mask's Mamba exclusion dropped"
WRONG_BEHAVIOUR = "the Mooncake store puts Mamba blocks by position, states the request does not hold there"
INVARIANT = f"a store puts only blocks the request holds (spec/stores.py): {MAMBA_STATES_BY_HANDOFF}"
CAUGHT_BY = (Check.STORES,)


def mamba_states_put_positionally(adapter) -> Undo:
    """store_mask asks Mamba groups' managers for their reachable blocks like any other group's."""
    return edit(MOONCAKE_STORE_MASK, [("exclude_mamba=True,", "exclude_mamba=False,")])


# ---------------------------------------------------------------- the OffloadingConnector's store side
OFFLOAD_NAME = "offloading-stores-a-chunk-it-does-not-hold"
OFFLOAD_UPSTREAM = ("none reported: a plausible store-side bug, storable_chunks rounding the computed tokens "
                    "up to a whole chunk")
OFFLOAD_WRONG_BEHAVIOUR = "the OffloadingConnector stores the chunk a step has only begun to compute"
OFFLOAD_INVARIANT = f"a store holds only chunks the request computed (spec/offloading_stores.py): {OFFLOAD_STORES_ONLY_COMPUTED_CHUNKS}"


def offloading_stores_unheld_chunk(adapter) -> Undo:
    """storable_chunks counts a chunk the step's tokens only reach into as storable (a ceiling
    where vLLM floors): its GPU block is allocated and its key known from the prompt's hashes,
    so the store job copies a block whose tail KV is not computed yet under the chunk's key."""
    return edit(OFFLOAD_STORABLE_CHUNKS, [(
        "num_chunks = num_offloadable_tokens // group_config.tokens_per_chunk",
        "num_chunks = -(-num_offloadable_tokens // group_config.tokens_per_chunk)",
    )])
