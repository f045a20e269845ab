"""The Markdown of a ``kvspec review`` report (kvspec/tools/review_report.py computes it), written for a
reader who never used kvspec: what was run, the verdict, then the details."""

from __future__ import annotations

from kvspec.oracles.invariants import SEVERITY

GLOSSARY = """\
## How to read this

* **Input**: one case both vLLMs were given. A *grouping* input is a model's layers, grouped
  into KV-cache groups by `get_global_kv_cache_groups`; a *lookup* is one prefix-cache query
  (`find_longest_cache_hit`) over a cache holding exactly the listed entries; an *operations*
  input is a sequence of scheduler steps (add a request, admit it with a cache lookup, compute
  chunks, finish, reset the cache) on a real `KVCacheManager`.
* **Violation**: an answer that breaks one of kvspec's rules: the hit is unsafe (a group would
  resume from KV or a Mamba state that is not there), or differs from kvspec's reference
  model, or a grouping differs from the reference's. Each names the rule (*invariant*).
* **Situation**: where it happened: for a lookup, which coordinator (`core` = the engine's,
  `mooncake` = the Mooncake store connector's), how many KV-cache groups of which kinds
  (`full` attention, `sliding_window`, `chunked_local`, `mamba`), whether EAGLE's one-block
  drop is on, and whether hits may end inside a block (`partial`).
* **Tokens gained / lost**: prompt tokens the head takes from the prefix cache minus the base's
  (positive: head recomputes less).
* **Hash unit**: the prompt is hashed in units of this many tokens; unit *i* stands for the
  first (i + 1) units of the prompt. A cache entry is (group, unit).
"""


def _cell(text: str, limit: int = 160) -> str:
    """Text safe inside a Markdown table cell."""
    text = " ".join(str(text).split())
    return (text[: limit - 1] + "…" if len(text) > limit else text).replace("|", "\\|")


def _example(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def _violation_table(rows: list[dict], what: str) -> list[str]:
    if not rows:
        return [f"None: no rule is broken {what}.", ""]
    lines = ["| rule broken | situation | inputs | smallest example's symptom |", "|---|---|---:|---|"]
    for _, group in _by_invariant(rows):
        for r in group:
            lines.append(f"| {r['invariant']} | {r['situation']} | {r['count']} | {_cell(r['message'])} |")
    return lines + [""]


def _by_invariant(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Rows grouped by the rule they break, most severe rule first."""
    rank = {name: i for i, name in enumerate(SEVERITY)}
    grouped: dict[str, list[dict]] = {}
    for r in rows:
        grouped.setdefault(r["invariant"], []).append(r)
    return sorted(grouped.items(), key=lambda kv: rank.get(kv[0], len(rank)))


def _test(row: dict) -> list[str]:
    if not row.get("regression_test"):
        return ["(No plain-vLLM test is emitted for operation sequences yet; `kvspec review` replays the sequence.)", ""]
    return ["A vLLM test that fails on the head and passes when the rule holds (for vLLM's `tests/v1/core/`):",
            "", "```python", row["regression_test"].rstrip(), "```", ""]


def markdown(report: dict) -> str:
    base, head, n = report["base"], report["head"], report["inputs"]
    new, fixed, same, deltas = (report[k] for k in ("new_violations", "fixed_violations", "unchanged_violations", "deltas"))
    count = lambda rows: sum(r["count"] for r in rows)  # noqa: E731
    out = [
        f"# kvspec review: {base['label']} → {head['label']}",
        "",
        f"Both vLLMs answered the same {sum(n.values())} inputs, drawn from seed {report['seed']}: "
        f"{n['grouping']} model shapes to group, {n['lookup']} prefix-cache lookups and "
        f"{n['operations']} operation sequences on a live KVCacheManager. Every answer was checked "
        "against kvspec's rules, and the two sides' answers were compared input by input. "
        f"It took {report['seconds']:.0f} s (base {base['seconds']:.0f} s, head {head['seconds']:.0f} s, side by side). "
        f"Replay: `{report['command']}`.",
        "",
        "## Verdict",
        "",
    ]
    if git := report.get("git"):
        merge_base = git["merge_base"] or "none (no common ancestor)"
        out[1:1] = ["", f"Repository `{git['repo']}`: base commit `{git['base']['sha']}` ({git['base']['ref']}), "
                        f"head commit `{git['head']['sha']}` ({git['head']['ref']}), merge base `{merge_base}`."]
    for side, sections in report.get("cannot_drive", {}).items():
        reasons = sorted({reason for lines in sections.values() for reason in lines})
        out += [f"**kvspec cannot drive the {side}** for {', '.join(sections)}: those inputs are not compared. "
                "This is kvspec's adapter failing to reach that vLLM, not a vLLM bug:", "",
                *(f"- {reason}" for reason in reasons), ""]
    if new:
        names = [name for name, _ in _by_invariant(new)]
        out.append(f"**The head breaks {len(names)} rule(s) the base keeps**, on {count(new)} inputs: " + "; ".join(names) + ".")
    else:
        out.append("**The head introduces no new violation.**")
    out += [
        "",
        "| | inputs | situations |",
        "|---|---:|---:|",
        f"| new violations in head | {count(new)} | {len(new)} |",
        f"| fixed in head | {count(fixed)} | {len(fixed)} |",
        f"| unchanged (both break the rule) | {count(same)} | {len(same)} |",
        f"| behavioural deltas (no rule broken, answers differ) | {count(deltas)} | {len(deltas)} |",
        "",
        "## New violations in head",
        "",
    ]
    if not new:
        out += ["None.", ""]
    for i, (invariant, rows) in enumerate(_by_invariant(new), 1):
        first = min(rows, key=lambda r: r["size"])
        also = sorted({a for r in rows for a in r["also"]})
        out += [
            f"### {i}. {invariant}",
            "",
            f"{sum(r['count'] for r in rows)} inputs in {len(rows)} situations."
            + (f" The same inputs also break: {'; '.join(also)}." if also else ""),
            "",
            "| situation | inputs | the head's answer on the smallest |",
            "|---|---:|---|",
            *(f"| {r['situation']} | {r['count']} | {_cell(r['message'])} |" for r in rows),
            "",
            f"The smallest example (`{first['situation']}`): {first['message']}",
            "",
            _example(first["example"]),
            "",
        ]
        out += _test(first)
        others = [r for r in rows if r is not first and r.get("regression_test")]
        if others:
            out += [f"<details><summary>The smallest example and test of each of the other {len(others)} situations</summary>", ""]
            for r in others:
                out += [f"**{r['situation']}**: {r['message']}", "", _example(r["example"]), ""] + _test(r)
            out += ["</details>", ""]
    out += ["## Fixed in head", ""] + _violation_table(fixed, "in the base that the head keeps")
    out += ["## Unchanged violations (both sides break the rule)", ""] + _violation_table(same, "by both sides")
    out += ["## Behavioural deltas (no rule broken, the answers differ)", ""]
    if not deltas:
        out += ["None: on every input where neither side breaks a rule, both answer the same.", ""]
    else:
        out += [
            "| what changed | situation | inputs | tokens gained (+) / lost (−), all inputs | per input |",
            "|---|---|---:|---:|---|",
        ]
        for d in deltas:
            tokens = f"{d['tokens']:+d}" if "tokens" in d else "n/a"
            span = f"{d['smallest_change']:+d} … {d['largest_change']:+d}" if "tokens" in d else "n/a"
            out.append(f"| {_cell(d['kind'] + ': ' + d['change'])} | {d['situation']} | {d['count']} | {tokens} | {span} |")
        out += ["", "The smallest example of each:", ""]
        for i, d in enumerate(deltas, 1):
            out += [f"{i}. **{d['kind']}: {d['change']}**, `{d['situation']}`", "", _example(d["example"]), "",
                    _example(d["answers"]), ""]
    return "\n".join(out + [GLOSSARY]) + "\n"
