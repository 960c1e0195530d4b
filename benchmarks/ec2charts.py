"""The EC2 study's charts, drawn as SVG by hand (benchmarks/ec2study.py).

One chart per shape: for each node count a group of bars, one per storage
configuration, makespan on the left half and hourly cost on the right.
Standard library only; no script, nothing fetched.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

COLOURS = {
    "local": "#888888",
    "shared": "#6fa3d6",
    "keep": "#9c6",
    "s3": "#d9534f",
    "s3cache": "#d9a04a",
}
WIDTH, HEIGHT, TOP, BOTTOM, LEFT = 760, 300, 30, 50, 50


def _panel(
    x0: float, width: float, title: str, cells: list[dict[str, Any]], value: str
) -> list[str]:
    """Grouped bars of ``value`` ("makespan" or "cost") in a panel from ``x0``."""

    def of(c: dict[str, Any]) -> float:
        return float(c["makespan"]) if value == "makespan" else float(c["cost"]["hour"])

    done = [c for c in cells if c["state"] == "complete"]
    top = max((of(c) for c in done), default=1.0) or 1.0
    nodes = sorted({c["nodes"] for c in done})
    configs = [k for k in COLOURS if any(c["config"] == k for c in done)]
    plot_h = HEIGHT - TOP - BOTTOM
    out = [
        f'<text x="{x0 + width / 2:.0f}" y="18" text-anchor="middle" class="title">'
        f"{escape(title)}</text>",
        f'<line x1="{x0}" y1="{HEIGHT - BOTTOM}" x2="{x0 + width}" y2="{HEIGHT - BOTTOM}" '
        'class="axis"/>',
        f'<text x="{x0 - 4}" y="{TOP + 4}" text-anchor="end" class="tick">{top:.3g}</text>',
    ]
    group = width / max(len(nodes), 1)
    bar = group * 0.8 / max(len(configs), 1)
    for g, n in enumerate(nodes):
        gx = x0 + g * group + group * 0.1
        out.append(
            f'<text x="{gx + group * 0.4:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" '
            f'class="tick">{n} node{"s" if n != 1 else ""}</text>'
        )
        for i, k in enumerate(configs):
            for c in done:
                if c["nodes"] == n and c["config"] == k:
                    h = of(c) / top * plot_h
                    y = HEIGHT - BOTTOM - h
                    label = f"{k}, {n} node(s): {of(c):.4g} {'s' if value == 'makespan' else 'USD'}"
                    out.append(
                        f'<rect x="{gx + i * bar:.1f}" y="{y:.1f}" width="{bar * 0.9:.1f}" '
                        f'height="{h:.1f}" fill="{COLOURS[k]}">'
                        f"<title>{escape(label)}</title></rect>"
                    )
    return out


def write_chart(path: Path, shape: str, cells: list[dict[str, Any]]) -> None:
    half = (WIDTH - 2 * LEFT) / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(shape)}: makespan and cost by storage and nodes">',
        "<style>text{font:11px sans-serif;fill:#333}.title{font-weight:bold}"
        ".axis{stroke:#555}.tick{font-size:10px}</style>",
        *_panel(LEFT, half - 20, f"{shape}: makespan (s)", cells, "makespan"),
        *_panel(LEFT + half + 20, half - 20, f"{shape}: cost, hourly (USD)", cells, "cost"),
    ]
    x = LEFT
    for k, colour in COLOURS.items():
        if any(c["config"] == k for c in cells):
            parts.append(
                f'<rect x="{x}" y="{HEIGHT - 18}" width="10" height="10" fill="{colour}"/>'
            )
            parts.append(f'<text x="{x + 14}" y="{HEIGHT - 9}">{k}</text>')
            x += 80
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")
