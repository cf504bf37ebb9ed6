"""The report as one self-contained HTML page: an inline SVG chart of a week (hours allocated vs released,
day by day) above the text table. Nothing is fetched: no script, no stylesheet, no font."""
from __future__ import annotations

import html

from .report import text

ALLOCATED, RELEASED = "#d9534f", "#5cb85c"


def week_svg(week: dict) -> str:
    width, height, left, bottom, top = 640, 300, 48, 40, 20
    plot_h = height - bottom - top
    bar_w = (width - left - 20) / 7
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="hours allocated and released per day">']
    for h in (0, 6, 12, 18, 24):
        y = top + plot_h * (1 - h / 24)
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{h} h</text>')
    for i, day in enumerate(week["days"]):
        x = left + i * bar_w + 6
        y = top + plot_h
        for hours, colour, what in ((day["allocated_hours"], ALLOCATED, "allocated"),
                                    (day["released_hours"], RELEASED, "released")):
            h = plot_h * hours / 24
            y -= h
            parts.append(f'<rect class="{what}" x="{x:.1f}" y="{y:.1f}" width="{bar_w - 12:.1f}" height="{h:.1f}" '
                         f'fill="{colour}"><title>{day["date"]}: {hours:.1f} h {what}</title></rect>')
        parts.append(f'<text x="{x + (bar_w - 12) / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle" '
                     f'font-size="11">{day["day"]} {day["date"][5:]}</text>')
    parts.append(f'<rect x="{left}" y="{height - 14}" width="10" height="10" fill="{ALLOCATED}"/>'
                 f'<text x="{left + 14}" y="{height - 5}" font-size="11">allocated '
                 f'{week["allocated_hours"]:.0f} h</text>'
                 f'<rect x="{left + 140}" y="{height - 14}" width="10" height="10" fill="{RELEASED}"/>'
                 f'<text x="{left + 154}" y="{height - 5}" font-size="11">released {week["released_hours"]:.0f} h '
                 f'of {week["observed_hours"]:.0f} h observed</text>')
    parts.append("</svg>")
    return "".join(parts)


def page(report: dict) -> str:
    t, w = report["totals"], report["week"]
    if any(c["gpus"] for c in report["cycles"]):
        title, released = "GPU hours given back", f"{t['gpu_hours_released']:.2f} GPU hours released"
    else:  # no pause recorded a GPU (c.GkewsApp.gpu_count 0): say what was released, not "0 GPU hours"
        title, released = "Hours the environment was released", f"{t['released_hours']:.2f} h released"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>jupyter-gkews report: {title}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}</style>
</head><body>
<h1>{title}</h1>
<p>{released} in all {t["cycles"]} cycle(s).</p>
<h2>The environment's hours, day by day</h2>
<p>Week from {html.escape(w["start"])} (UTC): the environment held its GPUs {w["allocated_hours"]:.1f} h and had
released them {w["released_hours"]:.1f} h, of {w["observed_hours"]:.1f} h observed (hours of the environment,
whatever its GPU count).</p>
{week_svg(w)}
<h2>Cycles</h2>
<pre>{html.escape(text(report))}</pre>
</body></html>
"""
