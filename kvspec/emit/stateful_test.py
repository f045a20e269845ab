"""Turn a stateful failure into a plain-vLLM pytest in the style of vLLM's
tests/v1/core/test_prefix_caching.py: it builds the same ``KVCacheManager``, makes the same
requests (prompts as literal tokens, the block hasher from ``get_request_block_hasher``),
replays every call impl/live.py made on it in order (impl/call_trace.py recorded them), and
asserts at the end what kvspec expected at the failing step: the hit of the last lookup, the
blocks it must claim, or the pool after the last call. Every earlier hit and allocation is
asserted as vLLM gave it (each was judged right when it came), so a replay that parts from the
recorded run says where.

The text is formatted as ruff formats it at line length 88: a line that does not fit is split
one item a line with a trailing comma, which ruff keeps.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from kvspec.emit.lookup_test import test_name
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES

WIDTH = 88
LOOKUPS = ("get_computed_blocks", "probe")

# Every interface class a replay may build: the group and config classes, and every spec class.
INTERFACE_SYMBOLS = {**S.INTERFACE_CLASSES, **{symbol.name: symbol for symbol in SPEC_SYMBOLS.values()}}


@dataclass(frozen=True)
class Expected:
    """What kvspec expected at the failing step, and why. ``hit``: the last lookup's length;
    ``real_blocks``: per group, the block indices the last lookup must claim as real blocks
    (not the null block); ``ref_counts`` (blocks 1 to n-1) and ``free_queue`` (head first):
    the pool after the last call; ``published``: which of a request's prefix keys one column's
    block carries after the last call (spec/caching.py)."""

    reason: str
    hit: int | None = None
    real_blocks: dict[int, list[int]] | None = None
    ref_counts: list[int] | None = None
    free_queue: list[int] | None = None
    # (request id, group, column, hash indices its block must carry, hash indices it must not)
    published: tuple[str, int, int, list[int], list[int]] | None = None

    @property
    def at_a_lookup(self) -> bool:
        return self.hit is not None or self.real_blocks is not None


@emits_paste_ready
def stateful_test(setup: dict, calls: list[tuple], expected: Expected, rules, name: str) -> str:
    """The test text, for a release with ``rules`` (spec/releases.py): the calls up to the last
    lookup when ``expected`` is about a lookup, else all of them."""
    if expected.at_a_lookup:
        last = max((i for i, call in enumerate(calls) if call[0] in LOOKUPS), default=None)
        if last is None:
            raise ValueError("a lookup's expectation, and no lookup in the calls")
        calls = calls[: last + 1]
    # The last lookup's own hit is left unasserted when the expectation is about it.
    judged = len(calls) - 1 if expected.at_a_lookup else None
    replay = _Replay()
    body = _setup_lines(setup, rules) + replay.lines(calls, judged) + _assertion_lines(expected)
    classes = sorted({g["spec_class"] for g in setup["groups"]} | {"KVCacheConfig", "KVCacheGroupSpec"})
    imports = [
        import_line(S.SAMPLING_PARAMS),
        import_line(S.SHA256),
        import_line(S.KV_CACHE_MANAGER),
        _import(S.GET_REQUEST_BLOCK_HASHER, S.INIT_NONE_HASH,
                *([S.MAKE_BLOCK_HASH_WITH_GROUP_ID] if expected.published else [])),
        _import(*(INTERFACE_SYMBOLS[c] for c in classes)),
        import_line(S.REQUEST, *([S.REQUEST_STATUS] if replay.sets_status else [])),
    ]
    torch = any("torch." in v for g in setup["groups"] for v in g["spec_keywords"].values())
    header = [*(["import torch", ""] if torch else []), *imports, "", "", *_HELPERS, "", ""]
    lines = header + [f"def {test_name('stateful ' + name)}():"] + [f"    {line}" if line else "" for line in body]
    return "\n".join(lines) + "\n"


_HELPERS = [
    "def ints(text):",
    '    """The whitespace-separated integers of ``text``."""',
    "    return [int(t) for t in text.split()]",
    "",
    "",
    "def make_request(request_id, prompt_token_ids, block_hasher):",
    "    return Request(",
    "        request_id=request_id,",
    "        prompt_token_ids=prompt_token_ids,",
    "        sampling_params=SamplingParams(max_tokens=1 << 20),",
    "        pooling_params=None,",
    "        block_hasher=block_hasher,",
    "    )",
]


def _import(*symbols) -> str:
    line = import_line(*symbols)
    return line if len(line) <= WIDTH else import_line(*symbols, wrapped=True)


def _call(head: str, args: list[str], indent: int = 4) -> list[str]:
    """``head(args)`` on one line if it fits at ``indent``, else one argument a line."""
    one = f"{head}({', '.join(args)})"
    if indent + len(one) <= WIDTH:
        return [one]
    return [f"{head}(", *(f"    {a}," for a in args), ")"]


def _ints(head: str, values: list[int], indent: int = 4) -> list[str]:
    """``head ints("...")``, the string split at spaces into lines that fit."""
    text = " ".join(map(str, values))
    one = f'{head}ints("{text}")'
    if indent + len(one) <= WIDTH:
        return [one]
    room = WIDTH - indent - 4 - 3  # the argument's indent, the quotes and a trailing space
    pieces = textwrap.wrap(text, room, break_long_words=False)
    return [f"{head}ints(", *(f'    "{p}{" " if i + 1 < len(pieces) else ""}"' for i, p in enumerate(pieces)), ")"]


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - 4 - 2, initial_indent="# ", subsequent_indent="# ", break_long_words=False)


def _setup_lines(setup: dict, rules) -> list[str]:
    lookahead = LOOKAHEAD_BLOCK_HASHES in rules
    if setup["num_hash_lookahead_tokens"] and not lookahead:
        raise ValueError(f"this release has no {LOOKAHEAD_BLOCK_HASHES.name!r}")
    # Lookahead hashes only where the release has them, and only when on (0 is the default).
    lookahead = lookahead and setup["num_hash_lookahead_tokens"]
    hasher_args = [str(setup["hash_block_size"]), "sha256"] + ([str(lookahead)] if lookahead else [])
    lines = ["init_none_hash(sha256)", *_call("block_hasher = get_request_block_hasher", hasher_args)]
    for gid, group in enumerate(setup["groups"]):
        keywords = [f"{k}={v}" for k, v in group["spec_keywords"].items()]
        lines += _call(f"spec_{gid} = {group['spec_class']}", keywords)
    lines.append("groups = [")
    for gid, group in enumerate(setup["groups"]):
        eagle = ", is_eagle_group=True" if group["is_eagle_group"] else ""
        lines.append(f"    KVCacheGroupSpec({group['layer_names']!r}, spec_{gid}{eagle}),".replace("'", '"'))
    lines += ["]", *_call("config = KVCacheConfig", [f"num_blocks={setup['num_blocks']}", "kv_cache_tensors=[]",
                                                     "kv_cache_groups=groups"])]
    if setup["retention_interval"] is not None:
        lines.append(f"config.prefix_cache_retention_interval = {setup['retention_interval']}")
    manager = [
        "config",
        *(f"{k}={setup[k]}" for k in ("max_model_len", "scheduler_block_size", "hash_block_size")),
        "enable_caching=True",
        f"use_eagle={setup['use_eagle']}",
        *([f"num_prefill_lookahead={setup['num_prefill_lookahead']}"] if setup["num_prefill_lookahead"] else []),
        *([f"num_hash_lookahead_tokens={lookahead}"] if lookahead else []),
    ]
    return lines + ["manager = KVCacheManager(", *(f"    {a}," for a in manager), ")", "pool = manager.block_pool"]


class _Replay:
    """The calls as lines; prompts named once and reused by prefix."""

    def __init__(self):
        self.prompts: list[list[int]] = []
        self.probes = 0
        self.sets_status = False

    def prompt(self, tokens: list[int], lines: list[str]) -> str:
        """An expression for ``tokens``: a slice of a named prompt, or a new name."""
        for i, known in enumerate(self.prompts):
            if known == tokens:
                return f"prompt_{i}"
            if known[: len(tokens)] == tokens:
                return f"prompt_{i}[:{len(tokens)}]"
        name = f"prompt_{len(self.prompts)}"
        self.prompts.append(list(tokens))
        lines += _ints(f"{name} = ", tokens)
        return name

    def lines(self, calls: list[tuple], judged: int | None) -> list[str]:
        """The lines of ``calls``; the hit of call ``judged`` is not asserted."""
        lines: list[str] = []
        for index, call in enumerate(calls):
            recorded = [] if index == judged else [f"assert hit == {call[-1]}"]
            name, *args = call
            if name == "request":
                request_id, tokens = args
                prompt = self.prompt(tokens, lines)
                lines.append(f'{request_id} = make_request("{request_id}", {prompt}, block_hasher)')
            elif name == "new_step_starts":
                lines += ["", "manager.new_step_starts()"]
            elif name == "get_computed_blocks":
                request_id = args[0]
                lines += [f"blocks, hit, {request_id}.shared_prefix_boundary = manager.get_computed_blocks({request_id})",
                          *recorded]
            elif name == "probe":
                prompt = self.prompt(args[0], lines)
                self.probes += 1
                lines += [f'probe = make_request("probe-{self.probes}", {prompt}, block_hasher)',
                          "blocks, hit, _ = manager.get_computed_blocks(probe)", *recorded]
            elif name == "allocate_slots":
                request_id, new_tokens, computed, with_blocks, lookahead, allocated = args
                call_args = [request_id, str(new_tokens)]
                if with_blocks:  # the hit and blocks of the lookup just made, as impl/live.py passes them
                    call_args += ["hit", "blocks"]
                elif computed:
                    call_args.append(str(computed))
                if lookahead:
                    call_args.append(f"num_lookahead_tokens={lookahead}")
                lines += _call("slots = manager.allocate_slots", call_args)
                lines.append(f"assert slots is {'not ' if allocated else ''}None")
            elif name == "take_kv_cache_block_copies":
                lines += ["_copies, retained = manager.take_kv_cache_block_copies()", "pool.free_blocks(retained)"]
            elif name == "num_computed_tokens":
                lines.append(f"{args[0]}.num_computed_tokens = {args[1]}")
            elif name == "status":
                lines.append(f"{args[0]}.status = RequestStatus.{args[1]}")
                self.sets_status = True
            elif name == "append_output_token_ids":
                lines.append(f"{args[0]}.append_output_token_ids({args[1]})")
            elif name == "cache_blocks":
                lines.append(f"manager.cache_blocks({args[0]}, {args[1]})")
            elif name == "free":
                lines.append(f"manager.free({args[0]})")
            elif name == "reset_prefix_cache":
                lines += ["", f"assert {'' if args[0] else 'not '}manager.reset_prefix_cache()"]
            else:
                raise ValueError(f"no replay for the call {call!r}")
        return lines


def _assertion_lines(expected: Expected) -> list[str]:
    """The final assertion, replacing the last lookup's recorded one when about a lookup."""
    lines = ["", *_comment(f"kvspec expected: {expected.reason}")]
    if expected.hit is not None:
        lines.append(f"assert hit == {expected.hit}")
    if expected.real_blocks is not None:
        lines += [f"for group, indices in {expected.real_blocks!r}.items():",
                  "    assert not any(blocks.blocks[group][i].is_null for i in indices)"]
    if expected.ref_counts is not None:
        lines += ["ref_counts = [b.ref_cnt for b in pool.blocks if not b.is_null]",
                  *_ints("assert ref_counts == ", expected.ref_counts)]
    if expected.published is not None:
        request, group, column, carried, not_carried = expected.published
        lines += [f'block_id = manager.get_block_ids("{request}")[{group}][{column}]',
                  "keys = pool.cached_block_hash_to_block"]
        for wanted, indices in ((True, carried), (False, not_carried)):
            if indices:
                lines += [f"for index in {indices!r}:",
                          f"    key = make_block_hash_with_group_id({request}.block_hashes[index], {group})",
                          f"    assert {'' if wanted else 'not '}keys.contain(key, block_id)"]
    if expected.free_queue is not None:
        lines += ["free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]",
                  *_ints("assert free == ", expected.free_queue)]
    return lines
