"""Replays on real vLLM of the proof mutants whose counterexamples are not a single lookup's
bits: the arithmetic of hash units (T0), the loop's exit (T4, over abstract finders, so a
concrete cache is searched for separately) and the grouping arithmetic (T7). Each counterexample
carries the mutant's number, for the runner to print beside vLLM's (proofs/counterexamples.py)."""

from __future__ import annotations

import z3

from kvspec.proofs.concrete import tokens
from kvspec.proofs.coordinators import reconcile
from kvspec.proofs.core import check
from kvspec.proofs.counterexamples import PageReplay, PartitionReplay, WholeBlocksReplay
from kvspec.proofs.encoding import FULL, MAMBA, SW, Rules
from kvspec.proofs.replay import lookup_from, pinned, replay
from kvspec.spec.layers import Kind, LayerSpec, page_size_bytes

# Attention layers of one KV head of 64 at 2 bytes (LayerSpec's defaults): 256 bytes per token.
BYTES_PER_HEAD_TOKEN = page_size_bytes(LayerSpec(Kind.FULL, 1))


def _ints(model, *terms) -> list[int]:
    return [model.eval(t, model_completion=True).as_long() for t in terms]


def scaling_replay(m, u, k):
    """T0's mutant divides by k*u + 1; vLLM counts whole blocks of k*u tokens over hashes of u
    (kv_cache_utils:BlockHashListWithBlockSize)."""

    def on_model(model) -> list[str]:
        tokens_, unit, per_block = _ints(model, m, u, k)
        line = (f"T0 mutant: {tokens_} tokens, hash unit {unit}, blocks of {per_block} units: "
                f"mutant {tokens_ // (per_block * unit + 1)} blocks, rule {(tokens_ // unit) // per_block}")
        return [WholeBlocksReplay(line, tokens_, unit, per_block * unit)]

    return on_model


def _simple_exit_search(n: int):
    """Three groups, the `simple` exit taken anyway (the mutant): one more pass would shorten it."""
    for kinds, needs in (((FULL, SW, MAMBA), (0, 1, 0)), ((FULL, MAMBA, SW), (0, 0, 1))):
        (sc,), facts = pinned("simple3", n, kinds, (1, 1, 1), needs=needs)
        bad = reconcile(sc, 1, Rules(simple_any_count=True))
        outcome = check(facts + [bad.stopped, bad.after.units < bad.hit.units])
        if outcome.status == "sat":
            return lookup_from(outcome.model, sc), tokens(outcome.model, bad.hit)
    return None


def simple_exit_replay(n: int = 8):
    def on_model(_model) -> list[str]:
        found = _simple_exit_search(n)
        if found is None:
            return ["T4 simple-exit mutant: no concrete three-group cache within the bound"]
        lookup, mutant_hit = found
        return replay("T4 simple exit with 3 groups", lookup, note=f"mutant {mutant_hit}")

    return on_model


def stop_strict_replay(n: int = 4):
    """The mutant stops only when the candidate grows, which it never does: on a cache where
    vLLM's loop exits, the mutant's is still running after every pass T4 allows."""

    def on_model(_model) -> list[str]:
        # Three groups: two would take the `simple` exit after one pass whatever the rule.
        (sc,), facts = pinned("strict", n, (FULL, SW, MAMBA), (1, 1, 1), needs=(0, 1, 0))
        passes = n + 2
        clean, bad = reconcile(sc, passes), reconcile(sc, passes, Rules(stop_strict=True))
        outcome = check(facts + [clean.stopped, z3.Not(bad.stopped), sc.m.units >= 1])
        if outcome.status != "sat":
            return ["T4 stop-strict mutant: no concrete cache within the bound"]
        lookup = lookup_from(outcome.model, sc)
        return replay("T4 stop only when the candidate grows", lookup, loop_exits=True,
                      note=f"rule {tokens(outcome.model, clean.hit)}, mutant: no exit after {passes} passes")

    return on_model


def partition_replay(n, gs):
    """T7's mutant keeps floor(n / size) groups, so one holds more layers than the group size;
    replayed as a model with ``gs`` full-attention and ``n`` sliding-window layers, for which
    the group size is ``gs`` (n >= 1.5 gs)."""

    def on_model(model) -> list[str]:
        layers_, size = _ints(model, n, gs)
        mutant_groups = max(layers_ // size, 1)
        line = (f"T7 mutant: {layers_} layers, group size {size}: mutant {mutant_groups} group(s), "
                f"largest {-(-layers_ // mutant_groups)} layers")
        layers = {f"model.layers.{i}.attn": LayerSpec(Kind.FULL, 16) for i in range(size)}
        layers |= {f"model.layers.{size + i}.attn": LayerSpec(Kind.SLIDING_WINDOW, 16, window=64)
                   for i in range(layers_)}
        return [PartitionReplay(line, layers, size)]

    return on_model


def page_replay(per_token, blocks):
    """T7's page mutant grows a block whose page does not divide the largest; replayed with two
    full-attention layers of those per-token sizes and block sizes."""

    def on_model(model) -> list[str]:
        tok, bs = _ints(model, *per_token), _ints(model, *blocks)
        pages = [t * b for t, b in zip(tok, bs)]
        largest = max(pages)
        grown = [p if p == largest else t * b * (largest // p) for p, t, b in zip(pages, tok, bs)]
        line = f"T7 page mutant: pages {pages} -> mutant {grown}, rule {[largest] * len(pages)}"
        layers = {
            f"model.layers.{i}.attn": LayerSpec(Kind.FULL, b, num_kv_heads=t // BYTES_PER_HEAD_TOKEN)
            for i, (t, b) in enumerate(zip(tok, bs))
        }
        return [PageReplay(line, layers)]

    return on_model
