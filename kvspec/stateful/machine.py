"""A stateful conformance check of a real vLLM ``KVCacheManager``, driven through schedules
vLLM's scheduler makes, against two independent judges.

* The shadow (kvspec/stateful/shadow.py) of what each physical block really holds, written the
  way the worker writes it. Every chunk's reads (the attention window before it, the Mamba
  state it resumes from, the drafter's next token) and every prefix-cache hit's blocks must
  hold exactly the request's prefix: a stale, reused, wrong-group or wrong-state block is
  caught whatever vLLM's hash map says.
* The reference cache model (reference/cache_model.py), replaying the pool operations vLLM's
  managers perform: the blocks an allocation hands out (eviction order), reference counts, the
  free queue and every cached key's copies must equal vLLM's after every step; each lookup's
  hit must equal reference/lookup.py's over the reference's cached keys, be safe by
  spec/hits.py, and its distance below the longest safe hit is recorded.

Configurations (kvspec/stateful/config.py): full attention, sliding window, chunked local
and Mamba groups, EAGLE off / drop / lookahead hashes, annotated or not, multi-module MTP,
partial hash hits, retention intervals, small pools. Each rule is one scheduler step
(impl/live.py): add a request, schedule a waiting or running request with a token budget
(vLLM's own chunk rules cut it), compute a prompt to its end, finish, preempt, probe a lookup,
reset the prefix cache.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import hypothesis
from hypothesis import Phase
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from kvspec.divergences.known import load as load_known
from kvspec.impl.live import LiveManager
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.resolution import resolved_hash_block_size
from kvspec.stateful.config import MachineConfig, eagle_modes, machine_configs, pool_need
from kvspec.stateful.judge import MachineJudge

VOCABULARY = st.integers(0, 7)  # few token values: shared prefixes are common
# Prompts are document prefixes, often the whole document, so later requests share them.
PROMPT_LENGTHS = st.one_of(st.just(10_000), st.integers(1, 400))
# Or (blocks, offset): a length just around a scheduler-block boundary, where hits are capped
# (M = length - 1) and EAGLE and Mamba disagree most.
LENGTHS = st.one_of(PROMPT_LENGTHS, st.tuples(st.integers(1, 16), st.sampled_from([1, 0, -1, 2])))
BUDGETS = st.sampled_from([1, 2, 3, 5, 8, 13, 16, 24, 32, 48, 64, 2048])
PICKS = st.integers(0, 7)
MAX_MODEL_LEN = 1024
MAX_PROMPT = 448  # leaves room to decode before max_model_len


@st.composite
def attention_groups(draw) -> list[CacheGroup]:
    """Attention groups only, EAGLE off (the configurations of kvspec/tools/programs.py)."""
    config = draw(machine_configs())
    groups = [CacheGroup(g.kind, g.block_size, g.window, g.chunk) for g in config.groups if g.kind != Kind.MAMBA]
    return groups or [CacheGroup(Kind.FULL, config.groups[0].block_size)]


def documents_from(shapes) -> list[list[int]]:
    """Documents from (length, fork, seed) triples: the first is seeded tokens; each later
    one shares the first's first ``fork`` tokens, then goes its own seeded way. Drawing seeds,
    not tokens, keeps Hypothesis's buffer small enough for 30 steps."""
    documents: list[list[int]] = []
    for length, fork, seed in shapes:
        tokens = random.Random(seed).choices(range(8), k=length)
        if documents:
            shared = documents[0][: min(fork, length)]
            tokens = shared + tokens[len(shared):]
        documents.append(tokens)
    return documents


def config_for(groups: list[CacheGroup], num_blocks: int) -> MachineConfig:
    """The machine configuration of plain groups: vLLM's hash unit, EAGLE off, dense retention."""
    return MachineConfig(tuple(groups), resolved_hash_block_size([g.block_size for g in groups]), None, 0, None,
                         num_blocks)


def live_manager(adapter, config: MachineConfig, record_pool: bool = True) -> LiveManager:
    return LiveManager.for_groups(
        adapter,
        list(config.groups),
        num_blocks=config.num_blocks,
        hash_block_size=config.hash_block_size,
        use_eagle=config.eagle == "drop",
        num_hash_lookahead_tokens=config.hash_lookahead_tokens,
        num_speculative_tokens=config.num_speculative_tokens,
        num_prefill_lookahead=config.prefill_lookahead,
        retention_interval=config.retention_interval,
        max_model_len=MAX_MODEL_LEN,
        record_pool=record_pool,
    )


def make_cache_machine(adapter, stats: Counter | None = None, configs=None, *, findings: dict | None = None,
                       strict_drafter: bool = False, fcfs: bool = False, known: dict | None = None,
                       state_builders: bool = True):
    """A RuleBasedStateMachine class over a fresh real ``KVCacheManager`` per example;
    ``stats`` counts what the runs reached (configurations, steps, lookups, hits, evictions,
    distances from the longest safe hit); ``configs`` overrides the drawn configurations;
    ``findings`` receives the first instance of each problem counted rather than failed (a
    drafter-only one, unless ``strict_drafter``); ``known`` is the recorded divergences
    (default: known-divergences.toml). By default any request may get a step (the
    priority policy can starve a running request); ``fcfs`` gives the step to the earliest
    admitted request still in prefill, as the first-come-first-served policy does.
    ``state_builders=False`` leaves out the rules that only weight the operation mix towards
    deep cache states (compute_prompt, decode), for benchmarks/operation_mix.py's comparison."""
    stats = Counter() if stats is None else stats
    findings = {} if findings is None else findings
    configs = machine_configs(eagle_modes(adapter.rules)) if configs is None else configs
    known = load_known() if known is None else known  # once per machine class, not per example

    class KVCacheManagerMachine(RuleBasedStateMachine):
        current = None  # the run in progress (set by setup)

        @initialize(config=configs, data=st.data())
        def configure_drawn(self, config, data):
            longest = min(MAX_PROMPT, 12 * config.scheduler_block_size)
            shapes = st.tuples(st.integers(config.scheduler_block_size, longest), st.integers(0, longest),
                               st.integers(0, 2**16))
            documents = documents_from(data.draw(st.lists(shapes, min_size=1, max_size=3), label="documents"))
            # A pool that holds the longest prompt and some decoding, times the drawn scale:
            # under two requests' worth, so eviction and preemption are common.
            need = pool_need(config, max(map(len, documents)) + 16)
            self.setup(dataclasses.replace(config, num_blocks=max(need, round(need * config.pool_scale))), documents)

        def configure(self, groups, num_blocks, documents):
            """Attention groups, EAGLE off (the signature kvspec/tools/programs.py calls)."""
            self.setup(config_for(list(groups), num_blocks), documents)

        def setup(self, config: MachineConfig, documents) -> None:
            self.config, self.documents = config, documents
            self.program: list[tuple] = []  # the operations so far, as (rule, *arguments)
            type(self).current = self  # the run in progress, for a report that needs its program
            self.live = live_manager(adapter, config)
            self.judge = MachineJudge(config, self.live, stats, findings, strict_drafter, known)
            self.waiting: list[str] = []
            self.running: list[str] = []  # in admission order: the last is preempted first
            self.next_id = 0
            self.chunks: list[tuple[str, int, int]] = []  # (request, start, end) of every computed chunk
            self._admission = (None, None)
            stats["examples"] += 1
            stats.update([f"shape {config.shape}", config.eagle_label, f"{len(config.groups)} groups"])
            stats.update(f"stateful kind {kind}" for kind in {g.kind for g in config.groups})
            if config.alignment < config.scheduler_block_size:
                stats["configs with partial hash hits"] += 1
            if config.multi_module_mtp:
                stats["runs with multi-module MTP"] += 1

        # ------------------------------------------------------------------ operations
        @rule(document=st.integers(0, 2), length=LENGTHS, suffix=st.lists(VOCABULARY, max_size=12),
              budget=st.none() | BUDGETS | BUDGETS)
        def add(self, document, length, suffix, budget):
            """A new request, admitted at once with ``budget`` tokens unless None."""
            stats.update(["steps", "operation add"])
            self.program.append(("add", document, length, suffix, budget))
            request_id = self.add_request(document, length, suffix)
            if budget is not None:
                if self._first_come(request_id) == request_id:
                    self.schedule_waiting_request(request_id, budget)
                else:
                    self.schedule_next_chunk(self._first_come(request_id), budget)

        def add_request(self, document, length, suffix) -> str:
            prompt = (self._document_prefix(document, length) + list(suffix))[:MAX_PROMPT]
            request_id = f"r{self.next_id}"
            self.next_id += 1
            self.live.add_request(request_id, prompt)
            self.waiting.append(request_id)
            return request_id

        # No rule has a precondition: a step with no valid rule would end the run early, so a
        # rule that has nothing to act on does the nearest useful thing instead.
        @rule(pick=PICKS, budget=BUDGETS, token=VOCABULARY, to_end=st.booleans())
        def schedule(self, pick, budget, token, to_end):
            """One step of a waiting or running request (a new one for the whole of document
            ``pick`` if there is none), or (``to_end``) steps until its prompt is computed."""
            stats.update(["steps", "operation schedule"])
            self.program.append(("schedule", pick, budget, token, to_end))
            alive = self.running + self.waiting or [self.add_request(pick, 10_000, [])]
            request_id = self._first_come(alive[pick % len(alive)])
            if request_id in self.waiting:
                self.schedule_waiting_request(request_id, budget, token)
            elif not to_end:
                self.schedule_next_chunk(request_id, budget, token)
            if to_end and request_id in self.running:
                self.compute_rest_of_prompt(request_id, budget, token)

        # Hypothesis sorts the rules by their number of arguments, then name, and its draws
        # favour the first: an argument-free rule named to sort first makes the favourite one
        # that builds cache state, not reset_prefix_cache (at seed 0 a quarter of all steps
        # were resets). With decode and schedule, three rules of seven build state.
        if state_builders:
            @rule()
            def compute_prompt(self):
                self.compute_first_prompt()

            @rule(pick=PICKS, tokens=st.lists(VOCABULARY, min_size=1, max_size=4))
            def decode(self, pick, tokens):
                self.decode_running(pick, tokens)

        def compute_first_prompt(self):
            """The newest request's prompt computed to its end, in chunks of the whole budget (a
            new request for the whole of the first document if none is alive): the newest, so
            that several prompts compete for the pool and evict each other's blocks."""
            stats.update(["steps", "operation compute_prompt"])
            self.program.append(("compute_prompt",))
            alive = self.running + self.waiting or [self.add_request(0, 10_000, [])]
            request_id = self._first_come(alive[-1])
            if request_id in self.waiting:
                self.schedule_waiting_request(request_id, 2048)
            if request_id in self.running:
                self.compute_rest_of_prompt(request_id)

        def decode_running(self, pick, tokens):
            """One decode step per token for a running request (its next chunk if its prompt is
            still being computed); admits a waiting one if none runs."""
            stats.update(["steps", "operation decode"])
            self.program.append(("decode", pick, tokens))
            if not self.running:
                if self.waiting:
                    self.schedule_waiting_request(self.waiting[pick % len(self.waiting)], 2048, tokens[0])
                return
            request_id = self._first_come(self.running[pick % len(self.running)])
            for token in tokens:
                if not self.schedule_next_chunk(request_id, 1, token):
                    return

        @rule(pick=PICKS, preempt=st.booleans())
        def stop(self, pick, preempt):
            """Finish a request, or preempt a running one back to waiting (nothing if none)."""
            stats.update(["steps", "operation stop"])
            self.program.append(("stop", pick, preempt))
            alive = self.running + self.waiting
            if not alive:
                return
            request_id = alive[pick % len(alive)]
            if preempt and request_id in self.running:
                self._preempt(request_id)
            else:
                self.finish_request(request_id)

        @rule(document=st.integers(0, 2), length=LENGTHS)
        def look_up_prompt(self, document, length):
            stats.update(["steps", "operation look_up_prompt"])
            self.program.append(("look_up_prompt", document, length))
            prompt = self._document_prefix(document, length)
            hit, claimed = self.live.lookup(prompt)
            self._judge_hit("probe", prompt, hit, claimed)

        @rule()
        def reset_prefix_cache(self):
            """Reset the prefix cache when no request runs (else preempt the last admitted one,
            as the scheduler's reset would, one request a step)."""
            stats.update(["steps", "operation reset_prefix_cache"])
            self.program.append(("reset_prefix_cache",))
            if self.running:
                self._preempt(self.running[-1])
                return
            assert self.live.reset_prefix_cache(), "reset refused with every block free"
            self.judge.sync()

        def _first_come(self, request_id):
            """The request a step goes to: under ``fcfs``, the earliest admitted request still
            in prefill, if any."""
            if fcfs:
                for running in self.running:
                    request = self.live.requests[running].request
                    if request.num_computed_tokens < request.num_prompt_tokens:
                        return running
            return request_id

        def _document_prefix(self, document, length) -> list[int]:
            if isinstance(length, tuple):  # (blocks, offset) around a scheduler-block boundary
                blocks, offset = length
                length = max(1, blocks * self.config.scheduler_block_size + offset)
            return self.documents[document % len(self.documents)][:length]

        # ------------------------------------------------------------------ the scheduler's moves
        def schedule_waiting_request(self, request_id, chunk, token=0):
            """Admit a waiting request (its hit judged); None when it stays waiting."""
            if self._schedule(request_id, chunk, token) is None:
                return None
            self.waiting.remove(request_id)
            self.running.append(request_id)
            return request_id

        def schedule_next_chunk(self, request_id, chunk, token=0):
            """One step of a running request; on a full pool the scheduler preempts the last
            admitted running request and retries, until it fits or preempted this one."""
            while request_id in self.running:
                if self._schedule(request_id, chunk, token) is not None:
                    return True
                if not self._was_refused_for_room(request_id, chunk):
                    return False
                self._preempt(self.running[-1])
            return False

        def compute_rest_of_prompt(self, request_id, chunk=2048, token=0):
            """Chunk after chunk until the prompt is computed or no chunk is scheduled."""
            request = self.live.requests[request_id].request
            while request_id in self.running and request.num_computed_tokens < request.num_prompt_tokens:
                if not self.schedule_next_chunk(request_id, chunk, token):
                    return

        def finish_request(self, request_id):
            (self.running if request_id in self.running else self.waiting).remove(request_id)
            self.live.finish(request_id)
            self.judge.sync(freeing=True)

        def _preempt(self, request_id):
            self.live.preempt(request_id)
            self.running.remove(request_id)
            self.waiting.insert(0, request_id)
            self.judge.sync(freeing=True)
            stats["preemptions"] += 1

        def _was_refused_for_room(self, request_id, chunk) -> bool:
            request = self.live.requests[request_id].request
            remaining = request.num_tokens - request.num_computed_tokens
            return self.live.chunk_for(request, min(chunk, remaining)) > 0

        def _schedule(self, request_id, budget, token):
            request = self.live.requests[request_id].request
            if request.num_tokens >= MAX_MODEL_LEN - 8:
                return None  # at the length limit the request stops (finish it)
            expected = None if self.live.requests[request_id].running else self.judge.expected_hit(request)
            step = self.live.schedule(request_id, budget, token)
            self.judge.sync()
            stats["steps scheduled" if step else "steps refused"] += 1
            if step is None:
                return None
            sequence = list(request.all_token_ids)
            if step.hit is not None:
                known = len(sequence) - (step.sampled is not None)  # the tokens at the lookup
                self._admission = (expected, known - 1)
                self._judge_hit(request_id, sequence, step.hit, step.claimed)
            self.judge.compute(step, sequence)
            self.chunks.append((request_id, step.start, step.end))
            return step

        def _judge_hit(self, who, prompt, hit, claimed):
            """Judge a hit (kvspec/tools/programs.py overrides this signature to record hits); an
            admission's reference hit, taken before its step, waits in ``_admission``."""
            (expected, max_length), self._admission = self._admission, (None, None)
            self.judge.hit(who, list(prompt), hit, claimed, expected=expected, max_length=max_length)

        # ------------------------------------------------------------------ invariants
        @invariant()
        def blocks_are_accounted_for(self):
            if hasattr(self, "live"):
                self.judge.accounting(self.running)

    return KVCacheManagerMachine


def run_machine(machine_class, settings: hypothesis.settings, steps: int) -> None:
    """Run the machine with every example exactly ``steps`` operations long (left alone, Hypothesis
    ends many runs after one step), then shrink a failure to a short program: the failing
    example is replayed from an in-memory database in a second run that may end runs early.
    Raises the shrunk failure (or the first one, if the replay does not fail)."""
    # One step more than ``steps``: Hypothesis counts the initialization as a step.
    generate = hypothesis.settings(settings, stateful_step_count=steps + 1, database=InMemoryExampleDatabase(),
                                   phases=[p for p in settings.phases if p != Phase.shrink])
    try:
        run_state_machine_as_test(machine_class, settings=generate, _min_steps=steps)
        return
    except Exception as failure:  # noqa: BLE001 - shrink it, or re-raise it as it is
        first = failure
    if Phase.shrink not in settings.phases:
        raise first
    database = generate.database
    # Hypothesis replays a primary entry as already shrunk: file it as a secondary one.
    for key in list(database.data):
        for value in list(database.fetch(key)):
            database.save(key + b".secondary", value)
            database.delete(key, value)
    shrink = hypothesis.settings(settings, stateful_step_count=steps + 1, database=database,
                                 phases=[Phase.reuse, Phase.shrink])
    run_state_machine_as_test(machine_class, settings=shrink)
    raise first

