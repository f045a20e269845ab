"""The report of ``kvspec mutate``: a Markdown table per function, the survivors with their
triage, and the same as JSON."""

from __future__ import annotations

import json
from collections import Counter

from kvspec.gate.files import write_atomically

EXIT_OK, EXIT_BELOW = 0, 1


def _rate(killed: int, judged: int) -> str:
    return f"{100 * killed / judged:.1f}%" if judged else "n/a"


def _counts(rows: list[dict]) -> Counter:
    counts = Counter(r["status"] for r in rows)
    counts.update(r["verdict"] for r in rows if r["status"] == "survived")
    return counts


def _table(targets, rows: list[dict], unreached: list) -> tuple[list[str], dict]:
    header = [
        "| function | mutants | killed | timeout | survived | equivalent | gap | untriaged | stillborn | unreached | kill rate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines, per_function = list(header), {}
    not_reached = Counter(m.target.name for m in unreached)
    for target in [*targets, None]:
        mine = [r for r in rows if target is None or r["mutant"].target == target]
        c = _counts(mine)
        run = len(mine) - c["stillborn"]
        killed = c["killed"] + c["timeout"]
        judged = run - c["equivalent"]
        name = target.name if target else "**all**"
        skipped = sum(not_reached.values()) if target is None else not_reached[target.name]
        if target is not None:
            per_function[name] = {
                "mutants": run, "killed": c["killed"], "timeout": c["timeout"], "survived": c["survived"],
                "equivalent": c["equivalent"], "gap": c["gap"], "untriaged": c["untriaged"],
                "stillborn": c["stillborn"], "unreached": skipped, "checks": list(target.checks),
            }  # fmt: skip
        lines.append(
            f"| {name} | {run} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['equivalent']} | {c['gap']} "
            f"| {c['untriaged']} | {c['stillborn']} | {skipped} | {_rate(killed, judged)} |"
        )
    return lines, per_function


def report(*, target, adapter_version, args, targets, results, unreached, triage, verdict_of, seconds) -> int:
    rows = []
    for r in results:
        verdict, reason = verdict_of(r["mutant"], triage) if r["status"] == "survived" else ("", "")
        outside = triage.get(r["mutant"].id, {}).get("outside", "") if verdict == "gap" else ""
        rows.append(r | {"verdict": verdict, "reason": reason, "outside": outside})
    table, per_function = _table(targets, rows, unreached)
    c = _counts(rows)
    killed, judged = c["killed"] + c["timeout"], len(rows) - c["stillborn"] - c["equivalent"]
    score = killed / judged if judged else 1.0
    survivors = [r for r in rows if r["status"] == "survived"]
    outside = Counter(r["outside"] for r in rows if r["outside"])
    modelled = judged - sum(outside.values())
    summary = (
        f"kill rate over non-equivalent mutants: {killed}/{judged} = {_rate(killed, judged)} "
        f"({c['killed']} killed by a check, {c['timeout']} by timeout; {c['equivalent']} equivalent, "
        f"{c['gap']} gaps, {c['untriaged']} untriaged; {c['stillborn']} stillborn not counted)"
    )
    summary_modelled = (
        f"kill rate within the configurations the gate models: {killed}/{modelled} = {_rate(killed, modelled)} "
        f"(leaving out {sum(outside.values())} gaps that need "
        + "; ".join(f"{why} ({n})" for why, n in sorted(outside.items(), key=lambda kv: (-kv[1], kv[0])))
        + ")"
    )
    md = [f"Mutation score of the gate on {target.label}, seed {args.seed}, limit {args.limit}", "", *table, "", summary]
    md += ["", summary_modelled] if outside else []
    killers = Counter(r["killed_by"] for r in rows if r["status"] == "killed")
    md += ["", "Killed by: " + ", ".join(f"{check} {n}" for check, n in killers.most_common())]
    md += ["", "| survivor | line | mutated to | verdict | reason |", "|---|---|---|---|---|"]
    for r in survivors:
        m = r["mutant"]
        verdict = f"gap (needs {r['outside']})" if r["outside"] else r["verdict"]
        cells = [f"`{m.id}`", f"`{m.original}`", f"`{m.mutated}`", verdict, r["reason"]]
        md.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    stillborn = [r for r in rows if r["status"] == "stillborn"]
    if stillborn:
        md += ["", "Stillborn (not counted): " + "; ".join(f"`{r['mutant'].id}` ({r['detail'][:80]})" for r in stillborn)]
    text = "\n".join(md)
    print(text)
    if args.markdown is not None:
        write_atomically(args.markdown, text + "\n", f"--markdown {args.markdown}")
    if args.json is not None:
        scores = {"kill_rate_non_equivalent": round(score, 4), "kill_rate_modelled": round(killed / modelled, 4) if modelled else 1.0}
        report_json = _as_json(target, adapter_version, args, per_function, rows, unreached, scores, seconds)
        write_atomically(args.json, json.dumps(report_json, indent=2) + "\n", f"--json {args.json}")
    below = score < args.min_score
    if below or c["untriaged"]:
        why = [f"kill rate {100 * score:.1f}% < {100 * args.min_score:.0f}%"] if below else []
        why += [f"{c['untriaged']} survivors untriaged in {args.triage}"] if c["untriaged"] else []
        print(f"kvspec mutate: {'; '.join(why)}")
        return EXIT_BELOW
    return EXIT_OK


def _mutant_json(m) -> dict:
    return {"id": m.id, "function": m.target.name, "operator": m.operator, "site": m.site, "line": m.line,
            "original": m.original, "mutated": m.mutated}  # fmt: skip


def _as_json(target, version, args, per_function, rows, unreached, scores, seconds) -> dict:
    return {
        "target": {"label": target.label, "version": version},
        "seed": args.seed,
        "limit": args.limit,
        "replay": f"kvspec mutate --vllm {version} --seed {args.seed} --limit {args.limit}"
        + "".join(f" --function {f}" for f in args.function),
        **scores,
        "seconds": round(seconds, 1),
        "functions": per_function,
        "mutants": [
            _mutant_json(r["mutant"])
            | {"status": r["status"], "killed_by": r["killed_by"], "detail": r["detail"], "verdict": r["verdict"],
               "reason": r["reason"], "outside": r["outside"], "seconds": round(r["seconds"], 2)}  # fmt: skip
            for r in rows
        ],
        "unreached": [_mutant_json(m) for m in unreached],
    }
