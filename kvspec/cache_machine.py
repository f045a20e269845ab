"""A stateful conformance check of a real vLLM ``KVCacheManager``, driven the way vLLM's
scheduler drives it, against a shadow of what each physical block really holds.

The shadow is the ground truth a prefix-cache hit is judged by: whenever a request computes
tokens, every block under them now holds the KV of exactly that token prefix. A hit is safe
iff, for every group, the blocks it claims hold the claimed prefix and cover what the group
needs to attend to at the hit (spec: full attention every token, sliding window the last
W-1, chunked local the current chunk). That is independent of vLLM's hash map, so a lookup
that returns a stale, reused or wrong-group block is caught whatever the map says.

Attention groups only for now (full, sliding window, chunked local; EAGLE off): Mamba needs
the scheduler's block-aligned chunk split and EAGLE needs the drafter's verification model.
"""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, precondition, rule

from kvspec.spec.hits import window_start
from kvspec.spec.layers import CacheGroup, Kind

NULL_BLOCK = 0
VOCABULARY = st.integers(0, 7)  # few token values: shared prefixes are common
# Prompts are document prefixes, often the whole document, so later requests share them.
PROMPT_LENGTHS = st.one_of(st.just(10_000), st.integers(1, 160))


@st.composite
def attention_groups(draw) -> list[CacheGroup]:
    base = draw(st.sampled_from([2, 4, 8]))
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from([Kind.FULL, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL]))
        block_size = base * draw(st.sampled_from([1, 2, 4]))
        if kind == Kind.SLIDING_WINDOW:
            groups.append(CacheGroup(kind, block_size, window=draw(st.integers(2, 6 * block_size))))
        elif kind == Kind.CHUNKED_LOCAL:
            groups.append(CacheGroup(kind, block_size, chunk=block_size * draw(st.integers(1, 4))))
        else:
            groups.append(CacheGroup(kind, block_size))
    scheduler_bs = math.lcm(*(g.block_size for g in groups))
    # vLLM: a chunked-local group looks up at the cache-hit alignment, which must be its block
    # size (single_type_kv_cache_manager:ChunkedLocalAttentionManager.find_longest_cache_hit).
    groups = [g for g in groups if g.kind != Kind.CHUNKED_LOCAL or g.block_size == scheduler_bs]
    return groups or [CacheGroup(Kind.FULL, base)]


def unsafe_claims(groups, prompt, hit, claimed, shadow) -> list[str]:
    """Why a hit of ``hit`` tokens backed by ``claimed`` blocks is not safe ([] if it is)."""
    problems = []
    for gid, (group, block_ids) in enumerate(zip(groups, claimed)):
        bs = group.block_size
        positions = {t // bs for t in range(window_start(group, hit), hit)}
        for i in sorted(positions):
            if i >= len(block_ids) or block_ids[i] == NULL_BLOCK:
                problems.append(f"group {gid} ({group.kind}) needs block {i} for hit {hit}: null")
        for i, block_id in enumerate(block_ids):
            if block_id == NULL_BLOCK:
                continue
            want = (gid, tuple(prompt[: (i + 1) * bs]))
            if shadow.get(block_id) != want:
                got = shadow.get(block_id)
                got_text = "nothing" if got is None else f"group {got[0]}'s {len(got[1])}-token prefix"
                problems.append(
                    f"group {gid} block {i} (id {block_id}) should hold the {(i + 1) * bs}-token "
                    f"prefix, holds {got_text}"
                )
    return problems


def make_cache_machine(adapter, stats: Counter | None = None):
    """A RuleBasedStateMachine class over a fresh real ``KVCacheManager`` per example;
    ``stats`` counts what the runs reached (examples, steps, lookups, hits by group kind)."""
    stats = Counter() if stats is None else stats

    class KVCacheManagerMachine(RuleBasedStateMachine):
        waiting = Bundle("waiting")
        running = Bundle("running")

        @initialize(groups=attention_groups(), num_blocks=st.integers(8, 96),
                    documents=st.lists(st.lists(VOCABULARY, min_size=24, max_size=160), min_size=1, max_size=3))
        def configure(self, groups, num_blocks, documents):
            self.groups, self.documents = groups, documents
            self.alignment = math.lcm(*(g.block_size for g in groups))
            self.live = adapter.live_manager(groups, num_blocks=num_blocks, max_model_len=512)
            self.num_blocks = num_blocks
            self.shadow: dict[int, tuple[int, tuple[int, ...]]] = {}  # block id -> (group, prefix)
            self.prompts: dict[str, list[int]] = {}
            self.next_id = 0
            stats["examples"] += 1

        # ------------------------------------------------------------------ operations
        @rule(target=waiting, document=st.integers(0, 2), length=PROMPT_LENGTHS,
              suffix=st.lists(VOCABULARY, max_size=12))
        def add_request(self, document, length, suffix):
            prompt = (self.documents[document % len(self.documents)][:length] + suffix)[:500]
            request_id = f"r{self.next_id}"
            self.next_id += 1
            self.prompts[request_id] = prompt
            self.live.add_request(request_id, prompt)
            return request_id

        @rule(target=running, request_id=consumes(waiting), chunk=st.integers(1, 64))
        def schedule_waiting_request(self, request_id, chunk):
            admission = self.live.admit_with_blocks(request_id, chunk)
            if admission is None:  # no room: the scheduler leaves it waiting; so do we
                self.live.requests.pop(request_id)
                return None  # Hypothesis drops a None result from the bundle
            hit, claimed = admission
            self._judge_hit(request_id, self.prompts[request_id], hit, claimed)
            self._record_computed(request_id)
            return request_id

        @rule(request_id=running, chunk=st.integers(1, 64))
        def schedule_next_chunk(self, request_id, chunk):
            scheduled = self.live.requests.get(request_id)
            if scheduled is None or scheduled.request.num_computed_tokens >= scheduled.request.num_tokens:
                return
            if self.live.step(request_id, chunk):
                self._record_computed(request_id)

        @rule(request_id=running)
        def compute_rest_of_prompt(self, request_id):
            """Chunk after chunk until the prompt is computed or the pool is full."""
            while self.live.requests.get(request_id) is not None:
                request = self.live.requests[request_id].request
                if request.num_computed_tokens >= request.num_tokens or not self.live.step(request_id, 64):
                    return
                self._record_computed(request_id)

        @rule(request_id=consumes(running))
        def finish_request(self, request_id):
            if request_id in self.live.requests:
                self.live.finish(request_id)

        @rule(document=st.integers(0, 2), length=PROMPT_LENGTHS)
        def look_up_prompt(self, document, length):
            prompt = self.documents[document % len(self.documents)][:length]
            hit, claimed = self.live.lookup(prompt)
            self._judge_hit("probe", prompt, hit, claimed)

        @precondition(lambda self: not self.live.requests)
        @rule()
        def reset_prefix_cache(self):
            assert self.live.reset_prefix_cache(), "reset refused with every block free"

        # ------------------------------------------------------------------ properties
        def _judge_hit(self, who, prompt, hit, claimed):
            stats["lookups"] += 1
            if hit:
                stats["hits"] += 1
                stats.update(f"hits with {g.kind}" for g in set(self.groups))
            max_length = len(prompt) - 1
            assert 0 <= hit <= max_length, f"{who}: hit {hit} exceeds M={max_length}"
            assert hit % self.alignment == 0, f"{who}: hit {hit} not a multiple of {self.alignment}"
            problems = unsafe_claims(self.groups, prompt, hit, claimed, self.shadow)
            assert not problems, f"{who}: unsafe hit {hit}: " + "; ".join(problems)

        def _record_computed(self, request_id):
            request = self.live.requests[request_id].request
            prompt, computed = self.prompts[request_id], request.num_computed_tokens
            for gid, (group, block_ids) in enumerate(zip(self.groups, self.live.block_ids(request_id))):
                for i, block_id in enumerate(block_ids):
                    if block_id != NULL_BLOCK and i * group.block_size < computed:
                        content = (gid, tuple(prompt[: min(computed, (i + 1) * group.block_size)]))
                        old = self.shadow.get(block_id)
                        # A block rewritten with other content was handed out again: an eviction.
                        stats["blocks reused"] += old is not None and old[1] != content[1][: len(old[1])]
                        self.shadow[block_id] = content

        @invariant()
        def blocks_are_accounted_for(self):
            if not hasattr(self, "live"):
                return
            stats["steps"] += 1
            holders = Counter(
                block_id
                for request_id in self.live.requests
                if self.live.requests[request_id].request.num_computed_tokens > 0
                for table in self.live.block_ids(request_id)
                for block_id in table
                if block_id != NULL_BLOCK
            )
            ref_counts = self.live.ref_counts()
            wrong = {b: (ref_counts[b], n) for b, n in holders.items() if ref_counts[b] != n}
            assert not wrong, f"ref counts differ from block-table references: {wrong}"
            free = self.live.free_block_ids()
            assert len(free) == len(set(free)), "a block is twice in the free queue"
            assert not set(free) & set(holders), f"blocks both free and in use: {set(free) & set(holders)}"
            assert len(free) + len(holders) == self.num_blocks - 1, "blocks lost or invented"

    return KVCacheManagerMachine
