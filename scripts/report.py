#!/usr/bin/env python3
"""Writes bench/REPORT.md from the results files (docs/RESULTS.md format):
bench/results/apps.json (graph and columnar studies), and iomethods.json and
core.json when present. Tables for every study; PNG plots under
bench/results/plots/ when matplotlib is available (the report says when it
is not). Standard library only otherwise.

    python3 scripts/report.py [--results DIR] [--out bench/REPORT.md] [--machine machine.log]
"""
import argparse
import datetime
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Named figures of the applications study and their targets (ratio at least this).
TARGETS = {
    "bfs.memory.vs_zerocopy": 0.9, "cc.memory.vs_zerocopy": 0.9,
    "bfs.host.vs_zerocopy": 0.7, "cc.host.vs_zerocopy": 0.7,
    "bfs.host.vs_uvm": 3.0, "cc.host.vs_uvm": 3.0,
    "taxi.q5.sel1pct.vs_fullload": 3.0,
}
# Where the report is written: plot links are relative to it.
REPORT_DIR = [os.path.join(ROOT, "bench")]
GRAPH_METHODS = ["hbm", "zerocopy", "uvm", "memory", "host", "host-cold", "zerocopy-cold"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        sys.exit(f"report: {path} is not valid JSON: {e}")


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        a = abs(v)
        if a != 0 and (a >= 1e6 or a < 1e-3):
            return f"{v:.{digits}g}"
        return f"{v:.{digits}g}" if a < 1000 else f"{v:,.0f}"
    return str(v)


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def header_lines(doc, path):
    rel = os.path.relpath(path, ROOT)
    cmd = doc.get("command", "")
    lines = [f"- **File:** `{rel}`; device {doc.get('device', '?')}, date {doc.get('date', '?')}, "
             f"commit `{doc.get('commit', '?')}`."]
    if cmd:
        lines.append(f"- **Command(s):** `{cmd}`")
    res = doc.get("results", [])
    bad = sum(r.get("mismatches") or 0 for r in res)
    unverified = [r["name"] for r in res if not r.get("verified")]
    lines.append(f"- **Checked:** {len(res) - len(unverified)} of {len(res)} results verified, "
                 f"{bad} mismatches in all.")
    return "\n".join(lines) + "\n"


def results_rows(results):
    rows = []
    for r in results:
        name = r["name"]
        target = TARGETS.get(name)
        ratio = r.get("ratio")
        verdict = ""
        if target is not None:
            verdict = "met" if ratio is not None and ratio >= target and (r.get("mismatches") or 0) == 0 \
                else "NOT met"
        rows.append([f"`{name}`", f"{fmt(r.get('value'))} {r.get('unit', '')}",
                     fmt(r.get("ceiling")), r.get("ceiling_name") or "", fmt(ratio),
                     f"≥ {target}" if target is not None else "", verdict,
                     fmt(r.get("verified")), r.get("mismatches", "-")])
    return rows


RESULT_HEADERS = ["name", "value", "ceiling", "ceiling is", "ratio", "target", "", "verified", "mismatches"]


def graph_times(results):
    """(algorithm, method) -> (load s, compute s), from the comparison entries."""
    pairs = {"memory.vs_zerocopy": ("memory", "zerocopy"), "host.vs_zerocopy": ("host", "zerocopy"),
             "host.vs_uvm": ("host", "uvm"), "memory.vs_hbm": ("memory", "hbm"),
             "host.vs_hbm": ("host", "hbm"), "zerocopy.vs_hbm": ("zerocopy", "hbm"),
             "uvm.vs_zerocopy": ("uvm", "zerocopy"), "memory.vs_uvm": ("memory", "uvm"),
             "host.cold.vs_zerocopy": ("host-cold", "zerocopy"),
             "host.cold.vs_zerocopy.cold": ("host-cold", "zerocopy-cold"),
             "host.cold.vs_uvm": ("host-cold", "uvm")}
    times = {}
    for r in results:
        m = re.match(r"^(bfs|cc|pagerank|sssp)\.(.+)$", r["name"])
        if not m or m.group(2) not in pairs:
            continue
        algo, (a, b) = m.group(1), pairs[m.group(2)]
        p = r.get("params", {})
        times[(algo, a)] = (p.get("value_load_s"), p.get("value_compute_s"))
        times[(algo, b)] = (p.get("ceiling_load_s"), p.get("ceiling_compute_s"))
    return times


def plot(plt, path, draw):
    fig, ax = plt.subplots(figsize=(7.5, 4))
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.relpath(path, REPORT_DIR[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "REPORT.md"))
    ap.add_argument("--machine", help="a log of the machine (nvidia-smi, nproc, free, df) to quote")
    args = ap.parse_args()
    REPORT_DIR[0] = os.path.dirname(os.path.abspath(args.out))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - any import failure means no plots
        plt = None
        no_plots = f"matplotlib is not available here ({type(e).__name__}), so this report has tables only."
    plots_dir = os.path.join(args.results, "plots")
    if plt:
        os.makedirs(plots_dir, exist_ok=True)

    md = ["# warpstore benchmark report\n",
          f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by "
          f"`python3 scripts/report.py` from the results files in `{os.path.relpath(args.results, ROOT)}` "
          "(format: docs/RESULTS.md). Every figure below was measured in one run on the machine named in its "
          "file, beside its ceiling or competitor from the same run.\n"]
    cmd = os.environ.get("WARPSTORE_REPORT_COMMAND")
    if cmd:
        md.append(f"Produced by: `{cmd}`\n")
    if args.machine and os.path.exists(args.machine):
        with open(args.machine) as f:
            md.append("## Machine\n\n```\n" + f.read().strip() + "\n```\n")
    if not plt:
        md.append(f"_{no_plots}_\n")

    apps = load(os.path.join(args.results, "apps.json"))
    if apps:
        res = apps.get("results", [])
        graph = [r for r in res if not r["name"].startswith("taxi.")]
        taxi = [r for r in res if r["name"].startswith("taxi.")]
        md.append("## Applications (`apps.json`)\n")
        md.append(header_lines(apps, os.path.join(args.results, "apps.json")))
        named = [r for r in res if r["name"] in TARGETS]
        if named:
            md.append("\n### Figures the issue names\n\n" + md_table(RESULT_HEADERS, results_rows(named)))
        missing = [n for n in TARGETS if n not in {r["name"] for r in res}]
        if missing:
            md.append("\nNot measured in this file: " + ", ".join(f"`{n}`" for n in missing) + ".\n")
        if graph:
            p = graph[0].get("params", {})
            md.append(f"\n### Graphs\n\nGraph `{p.get('graph', '?')}`: {fmt(p.get('vertices'))} vertices, "
                      f"{fmt(p.get('edges'))} CSR edges; warpstore cache {fmt(p.get('cache_bytes'))} bytes "
                      "(at most 25 % of the edge bytes). Values are graph edges per second; "
                      "end to end includes loading the graph from its file.\n\n")
            times = graph_times(graph)
            algos = [a for a in ["bfs", "cc", "pagerank", "sssp"] if any(k[0] == a for k in times)]
            rows = []
            for a in algos:
                for m in GRAPH_METHODS:
                    if (a, m) in times:
                        l, c = times[(a, m)]
                        rows.append([a, m, fmt(l), fmt(c), fmt((l or 0) + (c or 0))])
            md.append(md_table(["algorithm", "method", "load s", "compute s", "end to end s"], rows))
            md.append("\n" + md_table(RESULT_HEADERS, results_rows(graph)))
            if plt and algos:
                def draw(ax):
                    methods = [m for m in GRAPH_METHODS if any((a, m) in times for a in algos)]
                    w = 0.8 / max(1, len(methods))
                    for i, m in enumerate(methods):
                        xs = [j + i * w for j, a in enumerate(algos) if (a, m) in times]
                        ld = [times[(a, m)][0] or 0 for a in algos if (a, m) in times]
                        cp = [times[(a, m)][1] or 0 for a in algos if (a, m) in times]
                        bars = ax.bar(xs, cp, w, label=m)
                        ax.bar(xs, ld, w, bottom=cp, color=bars[0].get_facecolor(), alpha=0.35)
                    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(algos))], algos)
                    ax.set_ylabel("seconds (solid: compute, light: load)")
                    ax.set_title("Graph algorithms, end to end, by method")
                    ax.legend(fontsize=7, ncol=4)
                md.append(f"\n![graph times]({plot(plt, os.path.join(plots_dir, 'graph_times.png'), draw)})\n")
        if taxi:
            md.append("\n### Columnar analytics (taxi trips)\n\nQk reads the distance column and, for trips "
                      "over the threshold, k further columns; Q5 is the average fare per mile of long trips. "
                      "Value: rows per second end to end; ceiling: loading every needed column to the GPU, "
                      "then computing.\n\n")
            rows = []
            for r in taxi:
                p = r.get("params", {})
                sel = p.get("selected_rows", 0) / max(1, p.get("rows", 1))
                rows.append([f"`{r['name']}`", p.get("query"), p.get("layout"), fmt(p.get("line_size")),
                             f"{100 * sel:.3g} %",
                             fmt(p.get("value_s")), fmt(p.get("ceiling_s")), fmt(r.get("ratio")),
                             fmt(p.get("warpstore_bytes_read")), fmt(p.get("fullload_bytes")),
                             r.get("mismatches")])
            md.append(md_table(["name", "query", "layout", "line B", "selected", "warpstore s", "full load s", "speedup",
                                "warpstore bytes", "full-load bytes", "mismatches"], rows))
            sweep = sorted([r for r in taxi if r.get("params", {}).get("query") == "Q5"
                            and r.get("params", {}).get("layout") == "zone"],
                           key=lambda r: r["params"].get("selectivity_target", 0))
            if plt and sweep:
                def draw(ax):
                    for line in sorted({r["params"].get("line_size", 0) for r in sweep}):
                        series = [r for r in sweep if r["params"].get("line_size", 0) == line]
                        xs = [100 * r["params"]["selected_rows"] / r["params"]["rows"] for r in series]
                        ax.plot(xs, [r.get("ratio") or 0 for r in series], marker="o",
                                label=f"Q5 speedup, {line} B lines")
                    ax.axhline(1, color="grey", lw=0.8)
                    ax.axhline(3, color="red", lw=0.8, ls="--", label="target at 1 %")
                    ax.set_xscale("log")
                    ax.set_xlabel("trips selected (%)")
                    ax.set_ylabel("warpstore / full load (end to end)")
                    ax.set_title("Q5 speedup over loading whole columns")
                    ax.legend()
                md.append(f"\n![taxi sweep]({plot(plt, os.path.join(plots_dir, 'taxi_sweep.png'), draw)})\n")

    for study, title in [("iomethods", "I/O methods (`iomethods.json`)"), ("core", "Core (`core.json`)")]:
        doc = load(os.path.join(args.results, f"{study}.json"))
        if not doc:
            md.append(f"\n## {title}\n\nNo `{study}.json` in this run's results.\n")
            continue
        res = doc.get("results", [])
        md.append(f"\n## {title}\n\n" + header_lines(doc, os.path.join(args.results, f"{study}.json")))
        md.append("\n" + md_table(RESULT_HEADERS, results_rows(res)))
        with_ratio = [r for r in res if r.get("ratio") is not None]
        if plt and with_ratio:
            def draw(ax, rs=with_ratio, s=study):
                ax.barh([r["name"] for r in rs], [r["ratio"] for r in rs])
                ax.axvline(1, color="grey", lw=0.8)
                ax.set_xlabel("ratio to the ceiling (same run)")
                ax.set_title(s)
                ax.tick_params(axis="y", labelsize=6)
            path = os.path.join(plots_dir, f"{study}_ratios.png")
            md.append(f"\n![{study} ratios]({plot(plt, path, draw)})\n")

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(md))
    print(f"report: wrote {os.path.relpath(args.out, ROOT)}" + ("" if plt else " (no plots: no matplotlib)"))


if __name__ == "__main__":
    main()
