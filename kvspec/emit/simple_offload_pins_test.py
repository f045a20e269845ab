"""Plain-vLLM tests of the SimpleCPUOffload connector's bookkeeping (spec/simple_offload_pins.py):
a real scheduler built as kvspec/emit/simple_offload_test.py builds it, its CPU pool holding the
case's entries freed in the case's eviction order, a real GPU BlockPool bound to it, then the
case's operations as the scheduler calls them (impl/simple_offload_pins.py), up to the one where
a rule broke, and that rule asserted in plain terms. Each fails on vLLM while the finding stands,
at its last assertion."""

from __future__ import annotations

from kvspec.emit.simple_offload_test import header_lines, scheduler_lines
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_symbols import import_line
from kvspec.oracles.invariants import EQUALS_REFERENCE, PINNED_MATCH, PINS_RELEASED, REFRESH_ORDER
from kvspec.oracles.simple_offload_pins import latest_lookups, lookup_over, waiting_matches
from kvspec.reference.simple_offload import simple_offload_matched as reference_matched
from kvspec.spec.hits import blocks_read, units_per_block
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, Kind
from kvspec.spec.releases import SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX
from kvspec.spec.simple_offload_pins import Admit, Finish, LoadDone, Lookup, PinsCase, Press


@emits_paste_ready
def pins_test(case: PinsCase, steps, broken: int, invariant: str, rules, name: str) -> str:
    """The test replaying ``case`` up to operation ``broken``, where ``invariant`` broke;
    ``steps``: what each operation left on vLLM (impl/simple_offload_pins.py:Step)."""
    setting, unit = case.setting, case.setting.hash_block_size
    sizes = [g.block_size for g in setting.groups]
    gpu_blocks = 1 + len(case.request_tokens) * sum(-(-max(case.request_tokens) // size) for size in sizes)
    lines = scheduler_lines(setting, case.cpu.num_hashes, len(case.cpu.cached) + 2, case.lazy) + [
        f"order = {list(case.eviction_order)}  # (group id, hash index) entries, the first evicted first",
        "pool, entry_of = scheduler.cpu_block_pool, {}",
        "blocks = pool.get_new_blocks(len(order))",
        "for (group_id, index), block in zip(order, blocks, strict=True):",
        "    pool._insert_block_hash(make_block_hash_with_group_id(hashes[index], group_id), block, None)",
        "    entry_of[block.block_id] = (group_id, index)",
        "pool.free_blocks(blocks)",
        f"gpu = BlockPool({gpu_blocks}, enable_caching=True, hash_block_size={unit})",
        "scheduler.bind_gpu_block_pool(gpu)",
        "# Both names of the skip flag: 0.34 reads skip_reading_external_kv, 0.33 skip_reading_prefix_cache.",
        "requests = [",
        f'    types.SimpleNamespace(request_id=f"r{{i}}", block_hashes=hashes[: n // {unit}], num_tokens=n,',
        "                          skip_reading_external_kv=False, skip_reading_prefix_cache=False)",
        f"    for i, n in enumerate({list(case.request_tokens)})",
        "]",
        f"local, matched = [0] * {len(case.request_tokens)}, [0] * {len(case.request_tokens)}",
        "",
        "def cached():  # the entries whose blocks still hold their keys",
        "    return {entry_of[b.block_id]: b for b in pool.blocks if b.block_id in entry_of and b.block_hash}",
        "",
    ]
    if invariant == REFRESH_ORDER:
        lines += [
            "def eviction_order():  # the free cached entries, the first evicted first",
            "    held = cached()",
            "    return [entry_of[b.block_id] for b in pool.free_block_queue.get_all_free_blocks()",
            "            if b.block_id in entry_of and entry_of[b.block_id] in held]",
            "",
        ]
    for index, op in enumerate(case.ops[:broken + 1]):
        if index == broken and invariant == PINS_RELEASED and isinstance(op, Lookup):
            lines += ["pins_before = {entry: b.ref_cnt for entry, b in cached().items()}"]
        if index == broken and invariant == REFRESH_ORDER:
            lines += ["order_before = eviction_order()"]
        if index == broken:
            if invariant == REFRESH_ORDER and refresh_due(case, broken, rules):
                lines += [
                    "# The CPU copy of the local prefix, as the connector's own coordinator finds it.",
                    f"found = scheduler.cpu_coordinator.find_longest_cache_hit(requests[{op.request}].block_hashes, "
                    f"local[{op.request}])[0]",
                    "copy = {entry_of[b.block_id] for g in found for b in g if not b.is_null and b.block_id in entry_of}",
                ]
        lines += [f"# operation {index}: {op}", *_operation(case, op)]
    lines += _assertion(case, steps, broken, invariant, rules)
    replayed = case.ops[:broken + 1]
    more = [import_line(S.BLOCK_POOL)]
    more += [import_line(S.KV_CACHE_BLOCKS)] if any(isinstance(op, Admit) for op in replayed) else []
    more += [import_line(S.KV_CONNECTOR_OUTPUT)] if any(isinstance(op, LoadDone) for op in replayed) else []
    return "\n".join(header_lines(setting, name, *more) + [f"    {line}" if line else "" for line in lines]) + "\n"


def _operation(case: PinsCase, op) -> list[str]:
    if isinstance(op, Lookup):
        r, skip = op.request, op.skips_external_reads
        return [
            f"requests[{r}].skip_reading_external_kv = requests[{r}].skip_reading_prefix_cache = {skip}",
            f"got, _load_async = scheduler.get_num_new_matched_tokens(requests[{r}], {op.num_computed})",
            "# The scheduler zeroes the match of a request that skips external reads itself.",
            f"local[{r}], matched[{r}] = {op.num_computed}, {'0' if skip else 'got'}",
        ]
    if isinstance(op, Admit):
        r, sizes = op.request, [g.block_size for g in case.setting.groups]
        return [
            f"table = KVCacheBlocks(tuple(gpu.get_new_blocks(-(-(local[{r}] + matched[{r}]) // size)) for size in {sizes}))",
            f"scheduler.update_state_after_alloc(requests[{r}], table, matched[{r}])",
        ]
    if isinstance(op, LoadDone):
        return [f"if matched[{op.request}]:  # the worker reports its load done",
                f'    scheduler.update_connector_output(KVConnectorOutput(finished_recving={{"r{op.request}"}}))']
    if isinstance(op, Finish):
        return [f"scheduler.request_finished(requests[{op.request}], [])  # aborted while it waits"]
    if isinstance(op, Press):
        return [f"pool.free_blocks(pool.get_new_blocks(min({op.num_blocks}, pool.get_num_free_blocks())))  # a store"]
    raise TypeError(f"not an operation: {op!r}")


def _assertion(case: PinsCase, steps, broken: int, invariant: str, rules) -> list[str]:
    op = case.ops[broken]
    if invariant == EQUALS_REFERENCE:
        expected = 0 if op.skips_external_reads else reference_matched(
            lookup_over(case, op, steps[broken].before.pins), rules)
        return [f"# {expected} tokens is what vLLM's own algorithm, as kvspec's reference models it, matches "
                "over the entries the pool holds now",
                f"assert got == {expected}"]
    if invariant == PINS_RELEASED and isinstance(op, Lookup) and op.skips_external_reads:
        return ["# A lookup that skips external reads pins nothing.",
                "pins = {entry: b.ref_cnt for entry, b in cached().items()}",
                "assert {e: c for e, c in pins.items() if c > pins_before.get(e, 0)} == {}"]
    if invariant == PINS_RELEASED:
        return ["# No request waits and no load is in flight: no CPU block may stay pinned.",
                "assert {entry: b.ref_cnt for entry, b in cached().items() if b.ref_cnt} == {}"]
    if invariant == REFRESH_ORDER:
        return [
            f"refreshed = {'copy' if refresh_due(case, broken, rules) else 'set()'}  "
            "# what this admission moves to the most-recent end",
            "after = eviction_order()",
            "kept = [e for e in order_before if e in after and e not in refreshed]",
            "assert [e for e in after if e in kept] == kept  # the others keep their order",
            "moved = [i for i, e in enumerate(after) if e in refreshed]",
            "assert not kept or not moved or min(moved) > max(after.index(e) for e in kept)",
        ]
    if invariant == PINNED_MATCH:
        latest = latest_lookups(case.ops[:broken + 1])
        needed = [block for r, tokens in waiting_matches(steps[:broken + 1]).items()
                  for block in _needed_blocks(case.setting, latest[r], tokens, steps[broken].before.pins)]
        return ["# The CPU blocks the waiting matches read: each must still hold an entry.",
                f"needed = {needed}",
                "assert [block for block in needed if not set(block) & set(cached())] == []"]
    raise ValueError(f"no plain-vLLM assertion for {invariant!r}")


def refresh_due(case: PinsCase, admission: int, rules) -> bool:
    """Whether the admission at ``admission`` refreshes its local prefix's CPU copy
    (spec/simple_offload_pins.py)."""
    lookup = latest_lookups(case.ops[:admission])[case.ops[admission].request]
    return (SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX in rules and not case.lazy and lookup.num_computed > 0
            and not lookup.skips_external_reads)


def _needed_blocks(setting, lookup: Lookup, matched: int, held) -> list[list[tuple[int, int]]]:
    """Per CPU block a match of ``matched`` tokens past ``lookup``'s local prefix reads
    (spec/hits.py:blocks_read), the entries in ``held`` that prove it: one reaching the block's end
    or the match's (spec/hits.py:proves_tokens); Mamba's, its state at exactly the match's end."""
    unit, end, needed = setting.hash_block_size, lookup.num_computed + matched, []
    for gid, group in enumerate(setting.groups):
        if group.kind in NOT_PREFIX_CACHEABLE_KINDS:
            continue
        per = units_per_block(setting, group)
        for block in blocks_read(setting, gid, end):
            if (block + 1) * group.block_size <= lookup.num_computed:
                continue  # on the GPU: the local prefix
            if group.kind == Kind.MAMBA:
                entries = [(gid, end // unit - 1)]
            else:
                reach = min(end, (block + 1) * group.block_size)
                entries = [(gid, j) for j in range(block * per, (block + 1) * per) if (j + 1) * unit >= reach]
            needed.append([e for e in entries if e in held] or entries)
    return needed
