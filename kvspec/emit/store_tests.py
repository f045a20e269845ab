"""Plain-vLLM tests of the store sides, for a divergence kvspec/gate/stores.py meets that
known-divergences.toml does not record: which blocks the Mooncake store's saves put
(MooncakeStoreCoordinator.store_mask, driven as impl/stores.py drives it) and which chunks the
OffloadingConnector's store jobs write (OffloadingConnectorScheduler._build_store_jobs, driven
step by step as impl/offloading_stores.py drives it, as the hand-written
divergences/test_offloading_store_*.py do).

Each asserts what the reference says a later lookup reads (reference/stores.py,
reference/offloading_stores.py): the blocks or chunks of the divergence are put when a later
lookup reads them (``store-incomplete``), and not put when none does (``store-unread``). So it
fails on vLLM while the divergence stands, at its last assertion.
"""

from __future__ import annotations

import math

from kvspec.emit.lookup_test import spec_source, test_name
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.emit.vllm_tests import moved_import, offloading_eagle_imports, offloading_eagle_lines, offloading_spec_lines
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line

# What the last assertion says, per kind: the divergent blocks (chunks) put, or not.
_READ = {
    "store-incomplete": "a later lookup on this path reads them at a hit it can return; no {step} puts them",
    "store-unread": "no later lookup on this path reads them at any hit it can return; a {step} puts them",
}


def _groups(setting) -> list[str]:
    lines = ["groups = ["]
    for gid, group in enumerate(setting.groups):
        eagle = ", is_eagle_group=True" if group.is_eagle_group else ""
        lines.append(f'    KVCacheGroupSpec(["layers.{gid}"], {spec_source(group)}{eagle}),')
    return lines + ["]"]


def _interface(setting, *more) -> str:
    symbols = {SPEC_SYMBOLS[g.kind] for g in setting.groups} | {S.KV_CACHE_GROUP_SPEC, *more}
    return import_line(*sorted(symbols, key=lambda symbol: symbol.name))


def _final(kind: str, what: str, found: dict[int, frozenset[int]], written: str, step: str) -> list[str]:
    """The divergent blocks or chunks (``what``) of each group and the one assertion on them;
    ``written`` is the expression, with ``{op}`` for its operator, saying whether group ``g``'s
    block or chunk ``i`` was written (``op`` ``in``) or not (``not in``)."""
    listed = {gid: sorted(found[gid]) for gid in sorted(found)}
    name, test = ("read", written.format(op="not in")) if kind == "store-incomplete" else ("unread", written.format(op="in"))
    return [
        f"# (group: {what}) {_READ[kind].format(step=step)} (kvspec's reference)",
        f"{name} = {listed!r}",
        f"assert {{g: [i for i in {what} if {test}] for g, {what} in {name}.items()}} == {({gid: [] for gid in listed})!r}",
    ]


# ------------------------------------------------------------------ the Mooncake store
@emits_paste_ready
def mooncake_store_test(kind: str, case, found: dict[int, frozenset[int]], told_partial_hits: bool | None,
                        name: str) -> str:
    """The test of a ``kind`` divergence in the blocks ``found`` (per group) on the Mooncake
    store's saves of ``case`` (spec/stores.py:StoreCase); the coordinator is told the core's
    partial-hit decision ``told_partial_hits`` (None where the release's store decides it)."""
    setting = case.setting
    told = [] if told_partial_hits is None else [f"    enable_partial_hash_hits={told_partial_hits},"]
    saves = [(save.start, save.end) for save in case.saves]
    lines = _groups(setting) + [
        "# The coordinator the store connector builds (from_kv_cache_config), one for the request's life.",
        "coordinator = MooncakeStoreCoordinator(",
        "    groups,",
        f"    scheduler_block_size={math.lcm(*(g.block_size for g in setting.groups))},",
        f"    hash_block_size={setting.hash_block_size},",
        f"    use_eagle={setting.use_eagle},",
        *told,
        ")",
        "# The worker saves the computed tokens [start, end) in steps, each putting the blocks of its "
        "range that store_mask marks (None: all of them).",
        "put = [set() for _ in groups]",
        f"for start, end in {saves!r}:",
        f"    masks = coordinator.store_mask(end, start, num_prompt_tokens={case.num_prompt_tokens})",
        "    for g, (group, mask) in enumerate(zip(groups, masks, strict=True)):",
        "        size = group.kv_cache_spec.block_size",
        "        first, last = min(-(-start // size), end // size), end // size",
        "        put[g] |= {i for i in range(first, last) if mask is None or mask[i - first]}",
        *_final(kind, "blocks", found, "i {op} put[g]", "save"),
    ]
    header = [
        "import torch", "",
        import_line(S.MOONCAKE_COORDINATOR),
        _interface(setting), "", "",
        f"def {test_name(name)}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"


# ------------------------------------------------------------------ the OffloadingConnector
@emits_paste_ready
def offloading_store_test(kind: str, case, found: dict[int, frozenset[int]], name: str) -> str:
    """The test of a ``kind`` divergence in the chunks ``found`` (per group) on what the
    OffloadingConnector stores for ``case`` (spec/offloading_stores.py:OffloadStoreCase): the
    connector scheduler over an empty real CPU store, one scheduler step per ``case.saves``, then
    the request's finish (length-capped once prefilled, else aborted or ended in error) and the
    step that lists it finished (impl/offloading_stores.py)."""
    setting = case.setting
    prompt, unit = case.num_prompt_tokens, setting.hash_block_size
    stopped = "FINISHED_ERROR" if case.ends_in_error else "FINISHED_ABORTED"
    lines = _groups(setting) + [
        f"blocks_per_chunk, hash_unit, prompt = {setting.blocks_per_chunk}, {unit}, {prompt}",
        'config = VllmConfig(device_config=DeviceConfig(device="cpu"))',
    ]
    lines += offloading_eagle_lines(setting)
    lines += [
        "store = CPUOffloadingManager(num_chunks=4096)",
        *offloading_spec_lines("hash_unit"),
        "kv_cache_config = KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=groups)",
        "scheduler = OffloadingConnectorScheduler(spec, config, kv_cache_config)",
        "# Hash unit i stands for the chained hash of the first (i + 1) * hash_unit tokens.",
        f"lookahead = {setting.lookahead_tokens}  # tokens after a unit its hash covers",
        "",
        "def hashes_of(num_tokens):  # one per unit, once the lookahead tokens after it exist",
        '    return [BlockHash(hashlib.sha256(b"block-%d" % i).digest())',
        "            for i in range(max(0, num_tokens - lookahead) // hash_unit)]",
        "",
        "hashes = hashes_of(prompt)",
        'request = types.SimpleNamespace(request_id="r", kv_transfer_params=None, kv_hints=None, block_hashes=hashes,',
        "                                num_tokens=prompt, num_prompt_tokens=prompt, num_computed_tokens=0,",
        "                                num_in_flight_tokens=0, skip_reading_external_kv=False,",
        "                                shared_prefix_boundary=None, status=RequestStatus.RUNNING)",
        "request.is_finished = lambda: RequestStatus.is_finished(request.status)",
        "scheduler.on_new_request(request)",
        "",
        "def step(new_reqs, cached_ids, new_blocks, scheduled, finished):",
        "    cached = types.SimpleNamespace(req_ids=cached_ids, new_block_ids=new_blocks, resumed_req_ids=set())",
        "    output = types.SimpleNamespace(scheduled_new_reqs=new_reqs, scheduled_cached_reqs=cached,",
        "                                   num_scheduled_tokens=scheduled, finished_req_ids=finished,",
        "                                   preempted_req_ids=set(), kv_cache_block_copies=None,",
        "                                   kv_connector_block_state=None)",
        "    meta = scheduler.build_connector_meta(output)",
        "    return [key for job in meta.store_jobs for key in scheduler._jobs[job].keys]",
        "",
        "# One scheduler step per range of the prompt's tokens computed, each block a distinct live one.",
        "stored, table, next_id = [], [[] for _ in groups], 1",
        f"for index, (start, end) in enumerate({list(case.saves)!r}):",
        "    new = []",
        "    for g, group in enumerate(groups):",
        "        grow = -(-end // group.kv_cache_spec.block_size) - len(table[g])",
        "        new.append(list(range(next_id, next_id + grow)))",
        "        next_id += grow",
        "        table[g].extend(new[-1])",
        "    if index == 0:",
        '        new_req = types.SimpleNamespace(req_id="r", block_ids=tuple(list(t) for t in table))',
        '        stored += step([new_req], [], [], {"r": end - start}, set())',
        "    else:",
        '        stored += step([], ["r"], [tuple(new)], {"r": end - start}, set())',
        "    request.num_computed_tokens = end",
        "# Prefilled, it samples a token and hits its length cap; stopped mid-prefill, the engine ends it.",
        "if request.num_computed_tokens == prompt:",
        "    request.status, request.num_tokens = RequestStatus.FINISHED_LENGTH_CAPPED, prompt + 1",
        "    request.block_hashes = hashes = hashes_of(prompt + 1)  # what appending the token hashes",
        "else:",
        f"    request.status = RequestStatus.{stopped}",
        "scheduler.request_finished(request)",
        'stored += step([], [], [], {}, {"r"})',
        "",
        "def key(group, chunk):  # the key of a group's chunk: the hash unit that ends it",
        "    per_chunk = groups[group].kv_cache_spec.block_size * blocks_per_chunk // hash_unit",
        "    return make_offload_key(hashes[(chunk + 1) * per_chunk - 1], group)",
        "",
        *_final(kind, "chunks", found, "key(g, i) {op} stored", "store job"),
    ]
    header = [
        "import hashlib", "import types", "", "import torch", "",
        import_line(S.DEVICE_CONFIG, *offloading_eagle_imports(setting), S.VLLM_CONFIG),
        import_line(S.OFFLOADING_SCHEDULER),
        import_line(S.BLOCK_HASH),
        _interface(setting, S.KV_CACHE_CONFIG),
        import_line(S.OFFLOADING_EVENTS_CONFIG, S.MAKE_OFFLOAD_KEY),
        import_line(S.CPU_OFFLOADING_MANAGER),
        import_line(S.REQUEST_STATUS), "",
        *moved_import(S.WINDOW_IN_CHUNKS), "", "",
        f"def {test_name(name)}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"
