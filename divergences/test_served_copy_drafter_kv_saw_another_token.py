"""Replays the known divergence 'served-copy-drafter-kv-saw-another-token'
(known-divergences.toml) on plain vLLM.

EAGLE with the legacy last-block drop (no lookahead hashes). A's 4-token prompt P is
computed and A samples token 0, so the drafter KV in A's block at position 3 was
computed with token 0. B = P + [4, 3, 6, 2, 3] cannot use A's block (nothing proves
token 4, so it is dropped), computes its own copy of P's block and the next block, and
caches both: vLLM now holds two blocks under P's key. C = B's prompt hits 4 tokens,
proven by B's next block, but vLLM serves the FIRST copy (A's), whose drafter KV at
position 3 saw token 0, not C's token 4. The test asserts the copy the proof came from,
so it FAILS on vLLM by design: kvspec's tests/test_divergences.py runs it and expects
that failure."""

import torch

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request


def test_served_copy_drafter_kv_saw_another_token():
    init_none_hash(sha256)
    hasher = get_request_block_hasher(4, sha256)
    spec = FullAttentionSpec(
        block_size=4, num_kv_heads=1, head_size=64, dtype=torch.float16
    )
    config = KVCacheConfig(
        num_blocks=16,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layers.0"], spec)],
    )
    manager = KVCacheManager(
        config,
        max_model_len=64,
        scheduler_block_size=4,
        hash_block_size=4,
        enable_caching=True,
        use_eagle=True,
    )

    def run(request_id, prompt, num_new_tokens):
        request = Request(
            request_id=request_id,
            prompt_token_ids=prompt,
            pooling_params=None,
            sampling_params=SamplingParams(max_tokens=8),
            block_hasher=hasher,
        )
        blocks, hit, _ = manager.get_computed_blocks(request)
        manager.allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens=hit,
            new_computed_blocks=blocks,
        )
        request.num_computed_tokens = hit + num_new_tokens
        return request, hit, manager.get_block_ids(request_id)[0]

    prompt_p, document = [6, 6, 3, 2], [6, 6, 3, 2, 4, 3, 6, 2, 3]
    a, _, a_blocks = run("A", prompt_p, 4)
    # A samples 0: its drafter KV at position 3 saw token 0
    a.append_output_token_ids(0)
    manager.free(a)
    b, b_hit, b_blocks = run("B", document, 8)
    # B computed its own copy of P's block
    assert b_hit == 0 and b_blocks[0] != a_blocks[0]
    _c, c_hit, c_blocks = run("C", document, 1)
    assert c_hit == 4
    # B's copy: the one whose drafter KV at position 3 was computed with token 4, C's
    # next token.
    assert c_blocks[0] == b_blocks[0]
