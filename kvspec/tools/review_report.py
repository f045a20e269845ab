"""The comparison behind ``kvspec review`` and its Markdown: for every input of the workload, the
two sides' answers and violations become new / fixed / unchanged violations and behavioural
deltas, grouped by situation, each with its smallest example."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kvspec.draws import codec
from kvspec.emit.describe import describe_grouping, describe_lookup, describe_model
from kvspec.emit.vllm_tests import grouping_test, lookup_test
from kvspec.oracles.invariants import most_severe
from kvspec.oracles.situations import grouping_situation, lookup_situation, stateful_situation
from kvspec.tools.programs import describe as describe_program


@dataclass
class Input:
    """One input as both sides answered it."""

    kind: str  # "grouping", "lookup" or "operations"
    situation: str
    size: tuple  # smaller is simpler: the example shown is the smallest
    example: str  # the input, described
    base: object  # each side's answer, comparable
    head: object
    base_violations: dict = field(default_factory=dict)  # invariant -> message
    head_violations: dict = field(default_factory=dict)
    tokens: int = 0  # head's tokens reused minus base's
    change: str = ""  # what changed, in a few words
    answers: str = ""  # the two answers, described
    regression: object = None  # () -> a vLLM test, for a new violation


def _inputs(workload: dict, base: dict, head: dict) -> list[Input]:
    inputs = []
    driven = {section for section in ("models", "lookups", "programs") if base[section] is not None and head[section] is not None}
    names = {len(workload["models"]) - len(workload["real_models"]) + i: n for i, n in enumerate(workload["real_models"])}
    for i, model in enumerate(workload["models"] if "models" in driven else ()):
        b, h = base["models"][i], head["models"][i]
        answer = {side: r.get("grouping") or {"refused": r["refused"]} for side, r in (("base", b), ("head", h))}
        inp = Input("grouping", grouping_situation(model), (i not in names, len(model.layers), i),
                    (f"the {names[i]} shape: " if i in names else "") + describe_model(model),
                    answer["base"], answer["head"], dict(b["violations"]), dict(h["violations"]))
        if inp.base != inp.head:
            inp.change, inp.answers = _grouping_change(b, h)
        inp.regression = lambda model=model: grouping_test(model)
        inputs.append(inp)
    for i, item in enumerate(workload["lookups"] if "lookups" in driven else ()):
        setting, state, cap = item["setting"], item["state"], item["max_length"]
        for path in item["paths"]:
            b, h = base["lookups"][i][path], head["lookups"][i][path]
            bh, hh = (codec.decode(r["hit"]) if r["hit"] else None for r in (b, h))
            inp = Input("lookup", lookup_situation(path, setting),
                        ("name" not in item, len(setting.groups), state.num_hashes, cap, len(state.cached)),
                        (f"{item['name']}: " if "name" in item else "") + describe_lookup(path, setting, state, cap), bh, hh, dict(b["violations"]), dict(h["violations"]))
            if bh != hh:
                lb, lh = (x.length if x else None for x in (bh, hh))
                inp.tokens = (lh or 0) - (lb or 0)
                inp.change = "same hit length, other blocks reused" if lb == lh else ("longer hit" if inp.tokens > 0 else "shorter hit")
                inp.answers = f"base hit {lb}, head hit {lh}"
            inp.regression = lambda path=path, case=(setting, state, cap), hit=hh: lookup_test(path, case, hit)
            inputs.append(inp)
    for i, program in enumerate(workload["programs"] if "programs" in driven else ()):
        b, h = base["programs"][i], head["programs"][i]
        violations = [dict([r["violation"]]) if r["violation"] else {} for r in (b, h)]
        inp = Input("operations", stateful_situation(program["config"].groups, program["config"].eagle), (len(program["operations"]), i),
                    describe_program(program), (b["hits"], b["operations_run"]), (h["hits"], h["operations_run"]),
                    *violations)
        if inp.base != inp.head:
            inp.tokens = sum(h["hits"]) - sum(b["hits"])
            inp.change = "more tokens reused" if inp.tokens > 0 else "fewer tokens reused" if inp.tokens < 0 else "other hits, same total"
            inp.answers = f"base hits {b['hits']} ({b['operations_run']} operations), head hits {h['hits']} ({h['operations_run']})"
        inputs.append(inp)
    return inputs


def _grouping_change(b: dict, h: dict) -> tuple[str, str]:
    if "refused" in b or "refused" in h:
        change = "refused by both, differently" if "refused" in b and "refused" in h else (
            "refused in base only" if "refused" in b else "refused in head only")
    else:
        gb, gh = codec.decode(b["grouping"]), codec.decode(h["grouping"])
        if len(gb.groups) != len(gh.groups):
            change = f"{len(gb.groups)} groups become {len(gh.groups)}"
        elif gb.groups != gh.groups:
            change = "groups differ"
        else:
            change = "warnings differ"
    return change, f"base: {describe_grouping(b)}\nhead: {describe_grouping(h)}"


def _bucket(entries: list[Input], with_tokens: bool) -> dict:
    smallest = min(entries, key=lambda e: e.size)
    bucket = {"count": len(entries), "example": smallest.example, "answers": smallest.answers}
    if with_tokens:
        changes = [e.tokens for e in entries]
        bucket.update(tokens=sum(changes), smallest_change=min(changes), largest_change=max(changes))
    return bucket


def compare(workload: dict, base: dict, head: dict) -> dict:
    """The review's findings, as JSON-ready data."""
    new, fixed, unchanged, deltas = (defaultdict(list) for _ in range(4))
    inputs = _inputs(workload, base, head)
    for inp in inputs:
        # An input is filed once per table, under the most severe rule it breaks there.
        for table, names, side in (
            (new, inp.head_violations.keys() - inp.base_violations.keys(), "head"),
            (fixed, inp.base_violations.keys() - inp.head_violations.keys(), "base"),
            (unchanged, inp.base_violations.keys() & inp.head_violations.keys(), "head"),
        ):
            if names:
                messages = getattr(inp, f"{side}_violations")
                primary = most_severe([(n, messages[n]) for n in names])[0]
                table[(primary, inp.situation)].append((inp, side, names - {primary}))
        if inp.base != inp.head and not inp.base_violations and not inp.head_violations:
            deltas[(inp.kind, inp.situation, inp.change)].append(inp)

    def violations(table, with_test: bool) -> list[dict]:
        rows = []
        for (invariant, situation), entries in sorted(table.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1])):
            smallest, side, _ = min(entries, key=lambda e: e[0].size)
            row = {"invariant": invariant, "situation": situation, "count": len(entries),
                   "also": sorted(set().union(*(also for _, _, also in entries))),
                   "example": smallest.example, "message": getattr(smallest, f"{side}_violations")[invariant],
                   "size": list(smallest.size)}
            if with_test:
                row["regression_test"] = smallest.regression() if smallest.regression else None
            rows.append(row)
        return rows

    report = {
        # A section kvspec cannot drive on a side is not compared: it is kvspec's problem, not the head's.
        "cannot_drive": {side: r["cannot_drive"] for side, r in (("base", base), ("head", head)) if r.get("cannot_drive")},
        "base": {"label": base["label"], "version": base["version"], "seconds": base["seconds"]},
        "head": {"label": head["label"], "version": head["version"], "seconds": head["seconds"]},
        "inputs": {k: sum(i.kind == k for i in inputs) for k in ("grouping", "lookup", "operations")},
        "new_violations": violations(new, with_test=True),
        "fixed_violations": violations(fixed, with_test=False),
        "unchanged_violations": violations(unchanged, with_test=False),
        "deltas": [
            {"kind": kind, "situation": situation, "change": change,
             **_bucket(entries, with_tokens=kind != "grouping")}
            for (kind, situation, change), entries in sorted(deltas.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0]))
        ],
    }
    n_new, n_fixed = sum(r["count"] for r in report["new_violations"]), sum(r["count"] for r in report["fixed_violations"])
    report["summary"] = (
        f"{n_new} new violations in {len(report['new_violations'])} situations, {n_fixed} fixed, "
        f"{sum(r['count'] for r in report['unchanged_violations'])} unchanged, "
        f"{sum(d['count'] for d in report['deltas'])} behavioural deltas"
    )
    for side, sections in report["cannot_drive"].items():
        report["summary"] += f"; kvspec cannot drive the {side} for {', '.join(sections)} (not compared)"
    return report
