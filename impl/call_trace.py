"""The calls impl/live.py's ``LiveManager`` makes on its real ``KVCacheManager``, in order, as
plain data (ints, strings, lists, tuples; never a vLLM object), so that a stateful failure can
be replayed on plain vLLM without kvspec (kvspec/emit/stateful_test.py writes the test).

``setup`` is what the manager was built from: each KV-cache group's layer names, EAGLE flag,
spec class and the spec's constructor keywords as Python source, and the manager's and block
hasher's numbers. ``calls`` are tuples, first the call's name:

* ``("request", request_id, prompt)``: a request first passed to the manager;
* ``("new_step_starts",)``;
* ``("get_computed_blocks", request_id, hit)``: an admission's lookup and the hit vLLM gave;
* ``("probe", prompt, hit)``: the lookup of a new request with this prompt, never admitted;
* ``("allocate_slots", request_id, num_new_tokens, num_new_computed_tokens, with_blocks,
  num_lookahead_tokens, allocated)``: ``with_blocks``, the blocks of the lookup just made were
  passed; ``allocated``, the result was not None;
* ``("take_kv_cache_block_copies",)``: the copies taken, and their retained blocks freed;
* ``("num_computed_tokens", request_id, n)``, ``("status", request_id, "RUNNING")``,
  ``("append_output_token_ids", request_id, token)``: set on a request between calls;
* ``("cache_blocks", request_id, n)``, ``("free", request_id)``, ``("reset_prefix_cache", succeeded)``.

Recording appends a tuple per call: cheap enough to stay on for every run of the stateful check.
"""

from __future__ import annotations

import dataclasses

from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS

# The spec keywords the adapter passes (impl/vllm_symbols.py), plus those LiveManager sets
# (impl/vllm_specs.py:with_the_drafters_margins).
_EXTRA_SPEC_KEYWORDS = ("num_speculative_blocks", "extra_retained_tokens")
PROBE_ID = "kvspec-probe"  # the request impl/live.py looks a prompt up with, never admitted


def _source(value) -> str:
    """``value`` as Python source, strings in double quotes (as ruff formats them)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        items = [_source(v) for v in value]
        return "(" + (items[0] + "," if len(items) == 1 else ", ".join(items)) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_source(v) for v in value) + "]"
    if type(value).__name__ == "dtype":  # a torch dtype prints as torch.float16
        return str(value)
    return repr(value)


def group_setup(group, rules) -> dict:
    """A vLLM KVCacheGroupSpec as plain data: the spec's keywords the adapter sets (a required
    field's default is MISSING, so it is never left out)."""
    spec = group.kv_cache_spec
    # Every spec class the adapter builds (impl/vllm_specs.py), issue 15's kinds included.
    symbol = {**S.INTERFACE_CLASSES, **{s.name: s for s in SPEC_SYMBOLS.values()}}[type(spec).__name__]
    defaults = {f.name: f.default for f in dataclasses.fields(spec)}
    # A keyword left at its default (a draft flag that is off, say) is left out.
    names = [k for k in (*symbol.call_shape(rules)[1], *_EXTRA_SPEC_KEYWORDS)
             if k in defaults and getattr(spec, k) != defaults[k]]
    return {
        "layer_names": list(group.layer_names),
        "is_eagle_group": bool(getattr(group, "is_eagle_group", False)),
        "spec_class": type(spec).__name__,
        "spec_keywords": {name: _source(getattr(spec, name)) for name in names},
    }


class CallTrace:
    """Wraps one ``KVCacheManager`` instance's methods to record each call (it never changes an
    argument or a result). What LiveManager sets on a request between calls (its computed
    tokens, status, sampled tokens) is recorded before the next call on that request, which is
    where vLLM reads it; the retained blocks of the copies LiveManager takes it frees at once."""

    def __init__(self, manager, vllm_groups, rules, scheduler_block_size: int, hash_block_size: int,
                 num_hash_lookahead_tokens: int, num_prefill_lookahead: int):
        config = manager.kv_cache_config
        self.setup = {
            "groups": [group_setup(g, rules) for g in vllm_groups],
            "num_blocks": config.num_blocks,
            "retention_interval": getattr(config, "prefix_cache_retention_interval", None),
            "max_model_len": manager.max_model_len,
            "use_eagle": manager.use_eagle,
            "scheduler_block_size": scheduler_block_size,
            "hash_block_size": hash_block_size,
            "num_hash_lookahead_tokens": num_hash_lookahead_tokens,
            "num_prefill_lookahead": num_prefill_lookahead,
        }
        self.calls: list[tuple] = []
        self._seen: dict[str, tuple[int, str, int]] = {}  # request id -> (computed, status, outputs)
        for name in ("new_step_starts", "get_computed_blocks", "allocate_slots", "take_kv_cache_block_copies",
                     "cache_blocks", "free", "reset_prefix_cache"):
            original = getattr(manager, name)
            setattr(manager, name, getattr(self, "_" + name)(original))

    def _sync(self, request) -> str:
        """Record what was set on ``request`` since its last call; returns its id."""
        request_id = request.request_id
        if request_id not in self._seen:
            self.calls.append(("request", request_id, list(request.prompt_token_ids)))
            self._seen[request_id] = (0, "WAITING", 0)
        computed, status, outputs = self._seen[request_id]
        if request.num_computed_tokens != computed:
            self.calls.append(("num_computed_tokens", request_id, request.num_computed_tokens))
        if request.status.name != status:
            self.calls.append(("status", request_id, request.status.name))
        for token in list(request.output_token_ids)[outputs:]:
            self.calls.append(("append_output_token_ids", request_id, token))
        self._seen[request_id] = (request.num_computed_tokens, request.status.name, len(request.output_token_ids))
        return request_id

    def _new_step_starts(self, original):
        def new_step_starts():
            self.calls.append(("new_step_starts",))
            return original()
        return new_step_starts

    def _get_computed_blocks(self, original):
        def get_computed_blocks(request, *args, **kwargs):
            result = original(request, *args, **kwargs)
            if request.request_id == PROBE_ID:
                self.calls.append(("probe", list(request.prompt_token_ids), result[1]))
            else:
                self.calls.append(("get_computed_blocks", self._sync(request), result[1]))
            return result
        return get_computed_blocks

    def _allocate_slots(self, original):
        def allocate_slots(request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None,
                           num_lookahead_tokens=0, **others):
            request_id = self._sync(request)
            result = original(request, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                              num_lookahead_tokens, **others)
            self.calls.append(("allocate_slots", request_id, num_new_tokens, num_new_computed_tokens,
                               new_computed_blocks is not None, num_lookahead_tokens, result is not None))
            return result
        return allocate_slots

    def _take_kv_cache_block_copies(self, original):
        def take_kv_cache_block_copies():
            self.calls.append(("take_kv_cache_block_copies",))
            return original()
        return take_kv_cache_block_copies

    def _cache_blocks(self, original):
        def cache_blocks(request, num_computed_tokens):
            self.calls.append(("cache_blocks", self._sync(request), num_computed_tokens))
            return original(request, num_computed_tokens)
        return cache_blocks

    def _free(self, original):
        def free(request):
            self.calls.append(("free", self._sync(request)))
            return original(request)
        return free

    def _reset_prefix_cache(self, original):
        def reset_prefix_cache():
            succeeded = original()
            self.calls.append(("reset_prefix_cache", succeeded))
            return succeeded
        return reset_prefix_cache
