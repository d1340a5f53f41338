"""peers_bench.py's figures: chorus over TorchServe per cell, the issue's goals,
the printed table and the plot."""

from servers import SERVERS

GOALS = [  # (model, workers, ratio, at least)
    ("resnet18", 4, "throughput", 1.5),
    ("resnet18", 4, "footprint", 2.0),
    ("big_mlp", 4, "footprint", 3.0),
    # The same .mar on both servers (issue: torchserve_mar.*_vs_torchserve).
    ("resnet18_mar", 4, "throughput", 1.2),
    ("big_mar", 4, "footprint", 3.0),
]


def describe_cell(kind, cell):
    if "error" in cell:
        return f"{kind:<10} error"
    parts = [f"{kind:<10} first answer {cell['first_answer_s']:.2f} s "
             f"(all {cell['all_ready_s']:.2f} s)"]
    for c, load in cell["load"].items():
        parts.append(f"c{c} {load['throughput_per_s']:.1f}/s p50 {load['p50_ms']:.1f} "
                     f"p99 {load['p99_ms']:.1f} ms{'' if load['stable'] else ' (unstable)'}")
    memory = cell["memory"]
    parts.append(f"PSS {memory['pss_mib']:.0f} MiB (unique {memory.get('unique_mib', 0):.0f}) "
                 f"RSS {memory['rss_mib']:.0f} MiB")
    return ", ".join(parts)


def ratios(chorus, torchserve, concurrency, bare=None):
    if "error" in chorus or "error" in torchserve:
        return None
    by = {}
    for c in concurrency:
        a, b = chorus["load"][str(c)], torchserve["load"][str(c)]
        by[str(c)] = {"throughput": round(a["throughput_per_s"] / b["throughput_per_s"], 3),
                      "p99_latency": round(b["p99_ms"] / a["p99_ms"], 3),
                      "p50_latency": round(b["p50_ms"] / a["p50_ms"], 3)}
    top = str(max(concurrency))
    return {"throughput": by[top]["throughput"], "p99_latency": by[top]["p99_latency"],
            "footprint": round(torchserve["memory"]["pss_mib"] / chorus["memory"]["pss_mib"], 3),
            "footprint_unique": (round(torchserve["memory"]["unique_mib"] /
                                       chorus["memory"]["unique_mib"], 3)
                                 if "unique_mib" in chorus["memory"] and
                                 "unique_mib" in torchserve["memory"] else None),
            "rss": round(torchserve["memory"]["rss_mib"] / chorus["memory"]["rss_mib"], 3),
            "first_answer": round(torchserve["first_answer_s"] / chorus["first_answer_s"], 3),
            "all_ready": round(torchserve["all_ready_s"] / chorus["all_ready_s"], 3),
            "throughput_ceiling": (round(bare["throughput_per_s"] /
                                         torchserve["load"][top]["throughput_per_s"], 3)
                                   if bare else None),
            "at_concurrency": int(top), "by_concurrency": by}


def goals(result):
    """The issue's targets (GOALS) and whether this run met them."""
    met = []
    for model, workers, ratio, at_least in GOALS:
        r = (result["models"].get(model, {}).get("workers", {}).get(str(workers), {})
             .get("chorus_vs_torchserve"))
        value = r[ratio] if r else None
        goal = {"model": model, "workers": workers, "ratio": ratio, "at_least": at_least,
                "value": value, "met": value is not None and value >= at_least}
        if model.endswith("_mar"):
            goal["key"] = f"torchserve_mar.{ratio}_vs_torchserve"
        if ratio == "throughput" and r and r["throughput_ceiling"] is not None:
            # What a server doing nothing but the model's calls would reach.
            goal["ceiling"] = r["throughput_ceiling"]
            goal["reachable"] = r["throughput_ceiling"] >= at_least
        if ratio == "footprint" and r and r["footprint_unique"] is not None:
            # The same goal on the stack's distinct pages (PSS as if alone).
            goal["value_unique"] = r["footprint_unique"]
            goal["met_unique"] = r["footprint_unique"] >= at_least
        met.append(goal)
    return met


def mar_figures(result):
    """The issue's keys for the .mar rows, nested as it writes them
    (torchserve_mar.throughput_vs_torchserve, torchserve_mar.footprint_vs_torchserve):
    the values of their goals at N = 4 (None when not measured)."""
    figures = {}
    for goal in goals(result):
        if "key" in goal:
            figures[goal["key"].split(".", 1)[1]] = goal["value"]
    return figures


# --------------------------------------------------------------------------
# Report

def table(result):
    lines = ["chorus_vs_torchserve (higher is better for chorus; throughput and p99 at "
             f"concurrency {max(result['settings']['concurrency'])})",
             f"{'model':<13} {'N':>2} {'throughput':>10} {'p99_latency':>11} {'footprint':>9} "
             f"{'(unique)':>8} {'rss':>6} {'first_answer':>12} {'ceiling':>7}"]
    for name, model in result["models"].items():
        for n, entry in model["workers"].items():
            r = entry.get("chorus_vs_torchserve")
            if r is None:
                lines.append(f"{name:<13} {n:>2} {'failed':>10}")
                continue
            unique = "n/a" if r["footprint_unique"] is None else f"{r['footprint_unique']:.2f}"
            ceiling = ("n/a" if r.get("throughput_ceiling") is None
                       else f"{r['throughput_ceiling']:.2f}")
            lines.append(f"{name:<13} {n:>2} {r['throughput']:>10.2f} {r['p99_latency']:>11.2f} "
                         f"{r['footprint']:>9.2f} {unique:>8} {r['rss']:>6.2f} "
                         f"{r['first_answer']:>12.2f} {ceiling:>7}")
    lines.append("goals (N = 4):")
    for goal in result["goals"]:
        value = "n/a" if goal["value"] is None else f"{goal['value']:.2f}"
        line = (f"  {goal['model']} {goal['ratio']} >= {goal['at_least']}: {value} "
                f"({'met' if goal['met'] else 'not met'})")
        if "ceiling" in goal:
            line += (f"; ceiling (bare workers over TorchServe) {goal['ceiling']:.2f}, "
                     f"{'reachable' if goal['reachable'] else 'out of reach on this machine'}")
        if "value_unique" in goal:
            line += (f"; on distinct pages {goal['value_unique']:.2f} "
                     f"({'met' if goal['met_unique'] else 'not met'})")
        lines.append(line)
    return "\n".join(lines)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(result["models"])
    top = str(max(result["settings"]["concurrency"]))
    rows = [("throughput (req/s), c" + top, lambda c: c["load"][top]["throughput_per_s"]),
            ("p99 latency (ms), c" + top, lambda c: c["load"][top]["p99_ms"]),
            ("footprint: summed PSS (MiB)", lambda c: c["memory"]["pss_mib"]),
            ("first answer (s)", lambda c: c["first_answer_s"])]
    fig, axes = plt.subplots(len(rows), len(names), figsize=(3.4 * len(names), 2.4 * len(rows)),
                             squeeze=False)
    style = {"chorus": ("tab:blue", "o"), "torchserve": ("tab:orange", "s")}
    for column, name in enumerate(names):
        workers = result["models"][name]["workers"]
        for row, (label, value) in enumerate(rows):
            ax = axes[row][column]
            for kind in SERVERS:
                points = [(int(n), value(w[kind])) for n, w in workers.items()
                          if "error" not in w[kind]]
                if points:
                    ax.plot(*zip(*points), marker=style[kind][1], color=style[kind][0],
                            label=kind)
                unique = [(int(n), w[kind]["memory"]["unique_mib"]) for n, w in workers.items()
                          if "unique_mib" in w[kind].get("memory", {})]
                if row == 2 and unique:
                    ax.plot(*zip(*unique), marker=style[kind][1], color=style[kind][0],
                            linestyle="--", fillstyle="none",
                            label=f"{kind}, distinct pages")
            ax.set_xticks([int(n) for n in workers])
            ax.set_ylim(bottom=0, top=1.15 * max([ax.get_ylim()[1], 1e-9]))
            ax.set_xlim(0.5, max(int(n) for n in workers) + 0.5)
            ax.tick_params(labelsize=7)
            if row == 0:
                ax.set_title(name, fontsize=9)
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            if row == len(rows) - 1:
                ax.set_xlabel("workers / interpreters", fontsize=8)
    handles = {}
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=len(handles),
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
