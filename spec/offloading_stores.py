"""What a request writes to the OffloadingConnector's store: which of its chunks the connector
stores, as rules over the chunks a later offloading lookup reads (spec/offloading.py,
reference/offloading.py).

vLLM's connector scheduler stores a request in steps (offloading/scheduler.py:
OffloadingConnectorScheduler.build_connector_meta, once per scheduler step, and once more when
the request is in ``finished_req_ids``): each step's ``_build_store_jobs`` takes, per group, the
chunks from ``next_stored_chunk_idx`` to ``RequestOffloadState.storable_chunks`` (the whole
chunks within the tokens computed after the step, allocated and keyed; an annotated EAGLE
group's trailing chunk held back while decoding), keeps those ``_reachable_store_block_mask``
marks (each manager class's ``reachable_block_mask`` with the engine's alignment and
``final_segment_end_block``), and skips a chunk with a null block (a window or Mamba skip).

Two kinds of rule, each a property returning its violations, like spec/stores.py:

* SAFETY (``offload_store_safety_violations``): a step stores only whole chunks the request has
  computed by the end of that step, within its prompt (``offload_prompt_only``), keyed (under
  lookahead hashes a unit's key waits for the token after it: the prompt's last unit is stored
  at the finishing step, once the request has sampled a token), of its own groups
  (OFFLOAD_STORES_ONLY_COMPUTED_CHUNKS), and never a chunk with a null block in the request's
  table (OFFLOAD_SKIPS_NULL_BLOCKS).
* COMPLETENESS (``offload_store_completeness_gaps``): the steps store every chunk of the computed
  tokens a later offloading lookup reads at a hit it can return (OFFLOAD_STORES_EVERY_READ_CHUNK);
  a chunk stored that no later lookup reads is counted too. Either difference is a divergence
  kvspec records, never a failure hidden. Mamba's states reach the store through the boundary
  hand-off (``_build_aligned_boundary_store_jobs``), not modelled here (spec/stores.py's
  MAMBA_STATES_BY_HANDOFF).

Which chunks a later lookup reads is reference/offloading_stores.py's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.caching import hashed_units
from kvspec.spec.offloading import OffloadSetting, tokens_per_chunk

OFFLOAD_STORES_ONLY_COMPUTED_CHUNKS = (
    "a step stores only whole chunks within the tokens computed after it, the prompt and the hashed "
    "units (offloading/scheduler.py:RequestOffloadState.storable_chunks, _calc_num_offloadable_tokens)"
)
OFFLOAD_SKIPS_NULL_BLOCKS = (
    "a chunk holding a null block (skipped by a window or Mamba) is never stored "
    "(OffloadingConnectorScheduler._build_store_jobs: block_id == 0)"
)
OFFLOAD_STORES_EVERY_READ_CHUNK = (
    "every chunk a later offloading lookup reads within the computed tokens is stored "
    "(OffloadingConnectorScheduler._reachable_store_block_mask over reachable_block_mask, final_segment_end_block)"
)


@dataclass(frozen=True)
class OffloadStoreCase:
    """A request on the OffloadingConnector: the lookup setting, its prompt, and the scheduler
    steps that compute its first tokens, ``(start, end)`` in order, each where the last ended
    (a chunked prefill's token budget need not fall on a block)."""

    setting: OffloadSetting
    num_prompt_tokens: int
    saves: tuple[tuple[int, int], ...]
    # How a request that stops mid-prefill ends: aborted by its client, or ended by the engine
    # with FINISHED_ERROR (a failed KV load under the "fail" policy, an encoder-cache mismatch:
    # vllm.v1.core.sched.scheduler:Scheduler.update_from_output). A prefilled request ends
    # length-capped whatever this says.
    ends_in_error: bool = False

    def __post_init__(self) -> None:
        start = 0
        for begin, end in self.saves:
            if begin != start or end <= begin or end > self.num_prompt_tokens:
                raise ValueError(f"steps must tile [0, end) within the prompt: {self.saves}")
            start = end

    @property
    def stops_mid_prefill(self) -> bool:
        return self.computed_tokens < self.num_prompt_tokens

    @property
    def computed_tokens(self) -> int:
        return self.saves[-1][1] if self.saves else 0

    def computed_after(self, step: int) -> int:
        """Tokens computed after step ``step``; the finishing step (one past the saves) adds none."""
        return self.saves[min(step, len(self.saves) - 1)][1] if self.saves else 0

    def tokens_at(self, step: int) -> int:
        """Tokens the request holds at step ``step``: its prompt, and at the finishing step of a
        prefilled request the one token it sampled before its length cap."""
        finishing = step >= len(self.saves)
        return self.num_prompt_tokens + (finishing and not self.stops_mid_prefill)

    def keyed_after(self, step: int) -> int:
        """Tokens whose units the request has hashed at step ``step``, so that a chunk within them
        has its key (spec/caching.py:hashed_units; under lookahead hashes, not the last unit
        before the token after it exists)."""
        unit = self.setting.hash_block_size
        return hashed_units(self.tokens_at(step), unit, self.setting.lookahead_tokens) * unit


def offload_store_safety_violations(
    case: OffloadStoreCase, step: int, stored: dict[int, tuple[int, ...]], null_blocks=frozenset()
) -> list[str]:
    """Every chunk step ``step`` stores that the request does not hold: past the tokens computed
    after the step or the prompt, of no group of the request, or with a block in ``null_blocks``
    (``(group, block)`` pairs the table holds null)."""
    setting, found = case.setting, []
    computed = min(case.computed_after(step), case.num_prompt_tokens, case.keyed_after(step))
    for gid, chunks in sorted(stored.items()):
        if not 0 <= gid < len(setting.groups):
            found.append(f"step {step}: chunks {list(chunks)} stored for group {gid}, which the request lacks")
            continue
        size, per = tokens_per_chunk(setting, gid), setting.blocks_per_chunk
        beyond = [c for c in chunks if c < 0 or (c + 1) * size > computed]
        if beyond:
            found.append(f"step {step}: group {gid} stores chunks {beyond} of {size} tokens, "
                         f"past the {computed} tokens computed and keyed")
        nulls = [c for c in chunks if any((gid, c * per + b) in null_blocks for b in range(per))]
        if nulls:
            found.append(f"step {step}: group {gid} stores chunks {nulls} holding a null block")
    return found


def offload_store_completeness_gaps(needed: dict[int, frozenset[int]], stored: dict[int, frozenset[int]]):
    """Per group, chunks a later lookup reads that no step stored (OFFLOAD_STORES_EVERY_READ_CHUNK)."""
    gaps = {gid: chunks - stored.get(gid, frozenset()) for gid, chunks in needed.items()}
    return {gid: chunks for gid, chunks in gaps.items() if chunks}


def offload_store_unread_chunks(needed: dict[int, frozenset[int]], stored: dict[int, frozenset[int]]):
    """Per group, chunks stored that no later lookup reads: safe, space spent on nothing."""
    extra = {gid: chunks - needed.get(gid, frozenset()) for gid, chunks in stored.items()}
    return {gid: chunks for gid, chunks in extra.items() if chunks}
