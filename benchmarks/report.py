"""Table rows for docs/benchmarks.md from the harness's JSON results.

    .venv/bin/python benchmarks/report.py RESULT.json [RESULT.json ...]

Each RESULT is what ``bench.py SCENARIO --json RESULT`` wrote. Prints, per
result, a markdown table with one row per case: ours (median s), the peer
(median s), the ratio, the goal and whether it was met, the command, and
the date, machine and load it was measured at. The page's tables are
pasted from this output, so a figure on the page is one that was measured,
never typed by hand. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HEADER = (
    "| case | ours (s) | peer (s) | ratio | goal | met | command (ours / peer) | measured |\n"
    "|---|---:|---:|---:|---|---|---|---|"
)


def _cell(text: str) -> str:
    # A pipe inside a command would end the cell.
    return text.replace("|", "\\|").replace("\n", " ")


def _machine(result: dict[str, Any]) -> str:
    m = result.get("machine", {})
    return f"{m.get('cpus', '?')} CPUs, {m.get('platform', '?')}"


def rows(result: dict[str, Any]) -> list[str]:
    out = []
    for case in result["cases"]:
        tools = case["tools"]
        ours = tools[0]
        peer = tools[1] if len(tools) > 1 else None
        ratio = f"{case['ratio']:.2f}" if "ratio" in case else ""
        met = {True: "yes", False: "**no**"}.get(case.get("met"), "")
        cmd = f"`{_cell(ours['cmd'])}`"
        if peer is not None:
            cmd += f" / `{_cell(peer['cmd'])}` ({peer['name']})"
        others = [f"{t['name']} {t['median_s']:.3f}" for t in tools[2:]]
        if others:
            cmd += "; also " + ", ".join(others)
        when = f"{result['date']} UTC, load {ours['load_median']:.1f}"
        if result.get("cold"):
            when += ", cold"
        out.append(
            f"| {case['name']} | {ours['median_s']:.3f} | "
            + (f"{peer['median_s']:.3f}" if peer is not None else "")
            + f" | {ratio} | {_cell(case.get('goal', ''))} | {met} | {cmd} | {when} |"
        )
    return out


def table(result: dict[str, Any]) -> str:
    runs = len(result["cases"][0]["tools"][0]["runs_s"]) if result["cases"] else 0
    head = (
        f"{result['scenario']} — medians of {runs} rounds, order rotated; "
        f"machine: {_machine(result)}.\n\n"
    )
    return head + HEADER + "\n" + "\n".join(rows(result)) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="JSON files written by bench.py --json")
    args = ap.parse_args()
    parts = []
    for name in args.results:
        try:
            result = json.loads(Path(name).read_text())
            parts.append(table(result))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            print(f"Error: {name}: not a bench.py result ({e})", file=sys.stderr)
            sys.exit(2)
    print("\n".join(parts), end="")


if __name__ == "__main__":
    main()
