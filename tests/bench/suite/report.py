"""Turns a suite result (suite.json) into a Markdown report and PNG plots."""

import importlib.util
import os
import sys

MODE_ORDER = ["eager", "reference", "threads", "free_threaded", "processes", "torchscript",
              "chorus", "export", "aoti"]
MODE_STYLE = {"eager": ("tab:gray", "s"), "reference": ("tab:pink", "s"),
              "threads": ("tab:orange", "v"),
              "free_threaded": ("tab:olive", "<"),
              "processes": ("tab:green", "^"), "torchscript": ("tab:purple", "D"),
              "chorus": ("tab:red", "o"), "export": ("tab:brown", "P"),
              "aoti": ("tab:blue", "X")}
RATIO_GOALS = {"python_vs_torchscript": ("resnet18", 0.95),
               "chorus_vs_free_threaded": ("control_flow", 1.0),
               "chorus_n1_vs_python": ("control_flow", 1.0)}
RATIO_NAMES = ["chorus_vs_threads", "chorus_vs_processes_memory", "python_vs_torchscript",
               "chorus_vs_processes", "chorus_vs_processes_footprint", "python_vs_aoti",
               "python_vs_export", "chorus_vs_free_threaded",
               "chorus_vs_free_threaded_footprint", "chorus_n1_vs_python",
               "chorus_n1_vs_reference_python"]
FT = "free_threaded"
# Top-level keys of suite.json that are not models.
NOT_MODELS = ("suite", FT)


def models_of(result):
    return [name for name in result if name not in NOT_MODELS]


def _fmt(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio_table(result):
    n = result["suite"]["ratio_workers"]
    footprint_n = result["suite"].get("footprint_workers", n)
    # The free_threaded columns only where that mode ran (it needs --ft-python).
    ratio_names = [r for r in RATIO_NAMES if FT not in r
                   or any(result[m].get(r) is not None for m in models_of(result))]
    ratio_names = [r for r in ratio_names if "_n1_" not in r
                   or any(result[m].get(r) is not None for m in models_of(result))]
    heads = [f"{r} (N = {footprint_n})" if r == "chorus_vs_free_threaded_footprint"
             else f"{r} (N = 1)" if "_n1_" in r else r for r in ratio_names]
    lines = [f"Ratios at N = {n} (higher is better for chorus):", "",
             "| model | " + " | ".join(heads) + " |",
             "| --- |" + " --- |" * len(ratio_names)]
    for name in models_of(result):
        lines.append(f"| {name} | " +
                     " | ".join(_fmt(result[name].get(r)) for r in ratio_names) + " |")
    for ratio, (model, goal) in RATIO_GOALS.items():
        value = result.get(model, {}).get(ratio)
        if value is not None:
            verdict = "met" if value >= goal else "NOT met"
            lines += ["", f"Goal {model}.{ratio} >= {goal}: {value:.2f}, {verdict}."]
    return "\n".join(lines)


def cell_table(result):
    lines = ["| model | mode | N | items/s | p50 ms | p99 ms | RSS MiB | footprint MiB "
             "| first result s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in models_of(result):
        cells = result[name]["cells"]
        for mode in MODE_ORDER:
            for n, cell in sorted(cells.get(mode, {}).items(), key=lambda kv: int(kv[0])):
                label = mode + (" (GIL on)" if cell.get("gil_enabled") else "")
                lines.append(
                    f"| {name} | {label} | {n} | {cell['items_per_s']:.1f} | "
                    f"{cell['p50_ms']:.2f} | {cell['p99_ms']:.2f} | {cell['rss_mib']:.0f} | "
                    f"{_fmt(cell.get('footprint_mib'), 0)} | "
                    f"{cell['first_result_s']:.2f} |")
    return "\n".join(lines)


def markdown(result, name, plots=True):
    suite = result["suite"]
    header = (f"# Benchmark suite ({name})\n\n{suite['cpus']} CPUs, torch {suite['torch']}, "
              f"N in {suite['workers']}, {suite['warmup_s']} s warm-up and "
              f"{suite['measure_s']} s measured per cell, each cell the median of "
              f"{suite.get('rounds', 1)} fresh processes interleaved with the other modes "
              f"and each ratio the median of its per-round values, one intra-op thread "
              f"per worker ({suite['seconds']:.0f} s in all).\n")
    models = "\n".join(f"- `{m}`: {result[m]['description']}" for m in models_of(result))
    images = (f"![throughput]({name}_throughput.png)\n![memory]({name}_memory.png)\n\n"
              if plots else "")
    return (f"{header}\n{models}\n\n{ratio_table(result)}\n\n"
            f"{free_threaded_summary(result)}{images}{cell_table(result)}\n")


def free_threaded_summary(result):
    """The free_threaded mode's Python, or why it was skipped, and its probe's findings."""
    ft = result.get("free_threaded")
    if not ft:
        return ""
    if "skipped" in ft:
        return f"free_threaded mode skipped: {ft['skipped']}.\n\n"
    lines = [f"free_threaded mode: {ft['ft_python']} (Python {ft['python']}, "
             f"torch {ft['torch']})."]
    skipped = {m: result[m]["skipped_modes"][FT] for m in models_of(result)
               if FT in result[m].get("skipped_modes", {})}
    lines += [f"- `{m}` skipped: {why}" for m, why in skipped.items()]
    probe = ft.get("probe", {})
    if "imports" in probe:
        lines.append("- GIL re-enabled by importing: " + (", ".join(
            f"`{m}` (loads `{ext}`)" for m, ext in probe["gil_re_enabled_by"].items()) or "none"))
    for key in ("compile_one_thread", "compile_two_threads", "compile_two_threads_gil_off",
                "compile_in_each_thread_gil_off"):
        if key in probe:
            found = probe[key]
            said = (found["failed"] if "failed" in found else
                    "; ".join(", ".join(map(str, t["threads"])) for t in found["trials"]))
            lines.append(f"- `{key}` (each trial, each thread): {said}")
    return "\n".join(lines) + "\n\n"


def plot(result, out, name, key, ylabel, filename):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = models_of(result)
    fig, axes = plt.subplots(1, len(models), figsize=(3.2 * len(models), 3.0), squeeze=False)
    for ax, model in zip(axes[0], models):
        for mode in MODE_ORDER:
            cells = result[model]["cells"].get(mode, {})
            if not cells:
                continue
            points = sorted((int(n), cell[key]) for n, cell in cells.items())
            xs, ys = zip(*points)
            color, marker = MODE_STYLE[mode]
            ax.plot(xs, ys, marker=marker, color=color, label=mode)
            if key == "rss_mib" and mode == "processes" and all("footprint_mib" in c
                                                                 for c in cells.values()):
                # Processes share some pages (libtorch's code); counted once here.
                footprint = sorted((int(n), c["footprint_mib"]) for n, c in cells.items())
                ax.plot(*zip(*footprint), marker=marker, color=color, linestyle="--",
                        fillstyle="none", label="processes, shared pages once")
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("N (workers)", fontsize=8)
        ax.set_xticks(sorted({int(n) for c in result[model]["cells"].values() for n in c}))
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
    axes[0][0].set_ylabel(ylabel, fontsize=8)
    handles = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    labels = [m for m in MODE_ORDER + ["processes, shared pages once"] if m in handles]
    fig.legend([handles[m] for m in labels], labels, loc="lower center",
               ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = os.path.join(out, filename)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(result, out, name):
    """Writes NAME.md, NAME_throughput.png and NAME_memory.png into `out`; returns their paths.
    The plots need matplotlib (the default venv has it; a make test-python venv has not)."""
    md = os.path.join(out, f"{name}.md")
    plots = importlib.util.find_spec("matplotlib") is not None
    with open(md, "w") as f:
        f.write(markdown(result, name, plots))
    if not plots:
        print("suite: no matplotlib here, so no plots", file=sys.stderr)
        return [md]
    return [md,
            plot(result, out, name, "items_per_s", "items/s", f"{name}_throughput.png"),
            plot(result, out, name, "rss_mib", "RSS, all workers (MiB)", f"{name}_memory.png")]
