"""A real vLLM ``KVCacheManager`` that tests drive the way vLLM's scheduler drives it:
look up a new request's computed blocks, allocate slots for a chunk (which caches the full
blocks it completes), advance ``num_computed_tokens`` after the step, free when finished."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Scheduled:
    """What the scheduler keeps between steps for one request."""

    request: object  # vllm.v1.request.Request
    hit_length: int = 0  # the prefix-cache hit taken when it was admitted


class LiveManager:
    def __init__(
        self,
        adapter,
        vllm_groups: list,
        *,
        num_blocks: int,
        scheduler_block_size: int,
        hash_block_size: int,
        use_eagle: bool,
        max_model_len: int,
    ):
        from vllm.sampling_params import SamplingParams  # noqa: PLC0415
        from vllm.utils.hashing import sha256  # noqa: PLC0415
        from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: PLC0415
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: PLC0415
        from vllm.v1.request import Request  # noqa: PLC0415

        init_none_hash(sha256)
        self._Request, self._SamplingParams = Request, SamplingParams
        self._block_hasher = get_request_block_hasher(hash_block_size, sha256)
        self.manager = KVCacheManager(
            adapter._iface.KVCacheConfig(
                num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=vllm_groups
            ),
            max_model_len=max_model_len,
            scheduler_block_size=scheduler_block_size,
            hash_block_size=hash_block_size,
            enable_caching=True,
            use_eagle=use_eagle,
        )
        self.requests: dict[str, Scheduled] = {}

    def add_request(self, request_id: str, prompt: list[int]) -> Scheduled:
        request = self._Request(
            request_id=request_id,
            prompt_token_ids=list(prompt),
            sampling_params=self._SamplingParams(max_tokens=1),
            pooling_params=None,
            block_hasher=self._block_hasher,
        )
        scheduled = self.requests[request_id] = Scheduled(request)
        return scheduled

    def admit(self, request_id: str, first_chunk: int) -> int | None:
        """Look up the prefix-cache hit and allocate the first chunk of new tokens after it,
        as the scheduler does for a waiting request. Returns the hit, or None when the pool
        cannot hold the chunk (the request stays waiting, nothing is held)."""
        admission = self.admit_with_blocks(request_id, first_chunk)
        return admission[0] if admission is not None else None

    def admit_with_blocks(self, request_id: str, first_chunk: int):
        """``admit``, also returning the block ids the hit claims, per group (0 = null)."""
        s = self.requests[request_id]
        blocks, hit, _shared_prefix_boundary = self.manager.get_computed_blocks(s.request)
        claimed = blocks.get_block_ids()
        new_tokens = min(first_chunk, s.request.num_tokens - hit)
        allocated = self.manager.allocate_slots(
            s.request, new_tokens, num_new_computed_tokens=hit, new_computed_blocks=blocks
        )
        if allocated is None:
            return None
        s.hit_length = hit
        s.request.num_computed_tokens = hit + new_tokens  # the step computes the chunk
        return hit, claimed

    def step(self, request_id: str, chunk: int) -> bool:
        """Allocate and compute the next chunk of a running request's prompt."""
        request = self.requests[request_id].request
        new_tokens = min(chunk, request.num_tokens - request.num_computed_tokens)
        if self.manager.allocate_slots(request, new_tokens) is None:
            return False
        request.num_computed_tokens += new_tokens
        return True

    def finish(self, request_id: str) -> None:
        self.manager.free(self.requests.pop(request_id).request)

    def lookup(self, prompt: list[int]) -> tuple[int, tuple[list[int], ...]]:
        """The hit a new request with this prompt would get now, without admitting it, and
        the block ids it claims per group."""
        probe = self._Request(
            request_id="kvspec-probe",
            prompt_token_ids=list(prompt),
            sampling_params=self._SamplingParams(max_tokens=1),
            pooling_params=None,
            block_hasher=self._block_hasher,
        )
        blocks, hit, _boundary = self.manager.get_computed_blocks(probe)
        return hit, blocks.get_block_ids()

    def block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """The request's block table per group; 0 is the null block (skipped positions)."""
        return self.manager.get_block_ids(request_id)

    def reset_prefix_cache(self) -> bool:
        return self.manager.reset_prefix_cache()

    def free_block_ids(self) -> list[int]:
        return [b.block_id for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]

    def ref_counts(self) -> dict[int, int]:
        return {b.block_id: b.ref_cnt for b in self.manager.block_pool.blocks if not b.is_null}

    def cached_block_ids(self) -> set[int]:
        return {b.block_id for b in self.manager.block_pool.blocks if b.block_hash is not None}

    @property
    def num_free_blocks(self) -> int:
        return self.manager.block_pool.get_num_free_blocks()
