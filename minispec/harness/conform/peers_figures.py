"""docs/peers.md's generated sections and figures, from docs/peers/peers.json (peers.py writes it; docs_tables.py
renders and checks them)."""

from __future__ import annotations

import json
from pathlib import Path

from .report import word

PEERS = "docs/peers/peers.json"
THOROUGH = "docs/peers/rule_thorough.json"  # minispec conform rule ...:speculative_sampling --thorough
ASSISTED_THOROUGH = "docs/peers/assisted_thorough.json"  # minispec conform loop ...:assisted --thorough


PROCESSORS = "docs/peers/processors.json"  # python -m minispec.harness.conform.peers --set processors


def load(root: Path, name: str = PEERS) -> dict:
    return json.loads((Path(root) / name).read_text())


def verdict(res: dict) -> str:
    return ("PASS" if res["passed"] else "FAIL") + ("" if res["as_expected"] else " (not as expected)")


def failing_text(res: dict) -> str:
    s = res.get("smallest_failing")
    if not s:
        return "-"
    if "fault" in s:
        return f"{s['fault']}: {s['detail']}"
    if res["level"] == "rule":
        c = s["case"]
        where = f"{c['name']}, K = {c['K']}, V = {c['V']}"
    else:
        st = s["setting"]
        where = f"T = {st['temperature']}, top-k {st['top_k']}, top-p {st['top_p']}"
    if s["chi2"] == float("inf") and not s.get("tie_free", True):  # report.result_text: not wrong for certain
        against = "whichever way it is kept" if "tie_convention" in s else "kept toward the lower id (the one way tested then)"
        return (f"{where}: drew a sequence the target's law forbids with a tie at top-p's boundary {against} "
                f"(TV {s['tv']:.3f})")
    if s["chi2"] == float("inf"):
        return f"{where}: drew a sequence the target's law forbids (wrong for certain; TV {s['tv']:.3f})"
    return f"{where}: TV {s['tv']:.3f} +- {s['tv_se']:.3f} (noise {s['tv_noise']:.3f}), p = {s['p_value']:.2g}"


def size_text(res: dict) -> str:
    if res["level"] == "rule":
        return f"{res['cases']} cases x {res['draws_per_case']} rounds" if res["draws_per_case"] else f"{res['cases']} cases, exact"
    return f"{len(res['results'])} settings x {res['runs_per_setting']} runs of {res['tokens']} tokens; greedy on " \
           f"{len(res['greedy']['prompts'])} prompts"


def largest(res: dict) -> str:
    if res["level"] == "loop":
        return ", ".join(f"{r['tv']:.3f} ({r['tv_noise']:.3f})" if "tv" in r else r.get("fault", "?") for r in res["results"])
    return f"{res['max_tv']:.3f}" if res["max_tv"] is not None else "-"


def peers_table(root: Path, name: str = PEERS) -> str:
    res = load(root, name)
    lines = ["| peer | level | expected | verdict | size | TV seen (a correct peer's noise) | caught at TV >= (power 0.8) | "
             "smallest failing case | time |", "|---|---|---|---|---|---|---|---|---|"]
    for p in res["peers"].values():
        greedy = ""
        if p["level"] == "loop":
            g = p["greedy"]
            same = sum(x.get("got") == x.get("want") for x in g["prompts"])
            ties = sum(x.get("got") != x.get("want") and x.get("top2_logit_gap") == 0 for x in g["prompts"])
            greedy = f"; greedy {same}/{len(g['prompts'])} identical" + (f", {ties} at an exact tie" if ties else "")
        lines.append(f"| {p['what']} | {p['level']} | {p['expected']} | {verdict(p)}{greedy} | {size_text(p)} | "
                     f"{largest(p)} | {p['tv_80_max']:.3f} | {failing_text(p)} | {p['seconds']:.0f} s |")
    return "\n".join(lines)


def first_case(res: dict) -> dict:
    """The result on the first case, K = 1 with unwarped random rows (cases.py)."""
    return res["first_case"]


def ensemble_table(root: Path) -> str:
    """Per weight: the verdict, and on the first case (K = 1, random rows) the TV measured against the closed form
    (1 - w) TV(p, q) of docs/peers.md."""
    res = load(root)
    rows = [p for k, p in res["peers"].items() if k.startswith("rule_ensemble_")]
    lines = ["| weight w | verdict | cases failed | largest TV seen | first case: TV seen (noise) | (1 - w) TV(p, q) | "
             "smallest failing case |", "|---|---|---|---|---|---|---|"]
    for p in rows:
        w = float(p["what"].split("=")[-1].rstrip("`"))
        first = first_case(p)
        c = first["case"]
        tv_pq = 0.5 * sum(abs(a - b) for a, b in zip(c["target_row"], c["draft_row"]))
        lines.append(f"| {w:g} | {verdict(p)} | {p['failed']} of {p['cases']} | {p['max_tv']:.3f} | "
                     f"{first['tv']:.3f} +- {first['tv_se']:.3f} ({first['tv_noise']:.3f}) | {(1 - w) * tv_pq:.3f} | "
                     f"{failing_text(p)} |")
    return "\n".join(lines)


def values(root: Path) -> dict[str, str]:
    if not (Path(root) / PEERS).exists():
        return {}
    from ..doc_figures import run_line

    res = load(root)
    v = res["versions"]
    if (Path(root) / PROCESSORS).exists():
        pr = load(root, PROCESSORS)
        out_processors = {"peers.processors_run": f"{run_line(pr)}; {pr['seconds']:.0f} s"}
    else:
        out_processors = {}
    out = {**out_processors, "peers.run": f"{run_line(res)}; {res['seconds']:.0f} s",
           "peers.versions": f"transformers {v['transformers']}, torch {v['torch']}"}
    if (Path(root) / THOROUGH).exists():
        t = json.loads((Path(root) / THOROUGH).read_text())
        out["peers.thorough"] = (f"{word(t['passed'])} on {t['cases']} cases x {t['draws_per_case']:,} rounds: largest TV "
                                 f"{t['max_tv']:.3f}, every case catching a TV >= {t['tv_80_max']:.3f} with probability "
                                 f">= 0.8 ({run_line(t)}; {t['seconds'] / 60:.0f} min)")
    if (Path(root) / ASSISTED_THOROUGH).exists():
        t = json.loads((Path(root) / ASSISTED_THOROUGH).read_text())
        out["peers.assisted_thorough"] = (
            f"{word(t['passed'])} on {len(t['results'])} settings x {t['runs_per_setting']:,} runs: TV "
            + ", ".join(f"{r['tv']:.3f} ({r['tv_noise']:.3f})" for r in t["results"])
            + f", every setting catching a TV >= {t['tv_80_max']:.3f} with probability >= 0.8; greedy "
            f"{sum(x.get('got') == x.get('want') for x in t['greedy']['prompts'])}/{len(t['greedy']['prompts'])} identical "
            f"({run_line(t)}; {t['seconds'] / 60:.0f} min)")
    return out


def processors_table(root: Path) -> str:
    return peers_table(root, PROCESSORS) if (Path(root) / PROCESSORS).exists() else "(not measured yet)"


SECTIONS = {"peers": peers_table, "peers_ensemble": ensemble_table, "peers_processors": processors_table}
