"""Regression guard: compares a suite result's ratios against a committed baseline.

    check.py RESULT.json BASELINE.json [--threshold 0.07] [--report]

Only ratios are compared, never absolute times (they move with the machine).
Every ratio in the baseline is one where higher is better for chorus; a ratio
that falls more than `threshold` below its baseline fails, as does one the
result lacks. Exit status 0 when all hold, 1 otherwise, with one line per
ratio; with --report the same lines are printed and the exit status is 0
(make test prints the short suite's ratios this way: a ratio is the guard of
make bench-check, not of a test run that shares the machine). To accept
new figures, write the results' ratios into the baseline; given several
results, each ratio's lowest value (the floor of what the machine measured, so
that its noise alone does not trip the guard) over those that every result
measured:
    check.py RESULT.json [MORE.json ...] BASELINE.json --update
Ratios against the free_threaded mode (chorus_vs_free_threaded*) are not guarded:
they need a free-threaded Python that CI does not have, so --update leaves them out,
and one a baseline names is skipped, not failed, where the result says the mode was.
"""

import argparse
import json
import sys

DEFAULT_THRESHOLD = 0.07
# Top-level keys of a result that are not models.
NOT_MODELS = ("suite", "free_threaded")


def guarded(name):
    """Whether the guard keeps ratio `name` (not those against the optional free_threaded mode)."""
    return name.startswith(("chorus_vs_", "python_vs_")) and "free_threaded" not in name


def baseline_ratios(result):
    """{model: {ratio: value}} for every guarded ratio a result holds (non-null)."""
    return {model: {key: value for key, value in entry.items()
                    if guarded(key) and isinstance(value, (int, float))}
            for model, entry in result.items() if model not in NOT_MODELS}


def floor_ratios(many):
    """Each ratio's lowest value over several results' {model: {ratio: value}},
    for the ratios every result measured."""
    floor = {}
    for model, values in many[0].items():
        for name in values:
            seen = [r.get(model, {}).get(name) for r in many]
            if all(value is not None for value in seen):
                floor.setdefault(model, {})[name] = min(seen)
    return floor


def measured_on(results):
    """Where and from how many runs a baseline's floors come."""
    suites = [r.get("suite", {}) for r in results]
    return {"runs": len(results), "short_runs": sum(bool(s.get("short")) for s in suites),
            "cpus": sorted({s.get("cpus") for s in suites if s.get("cpus")}),
            "torch": sorted({s.get("torch") for s in suites if s.get("torch")})}


def compare(result, baseline, threshold=DEFAULT_THRESHOLD):
    """(ok, lines): each baseline ratio against the result's."""
    ok, lines = True, []
    ft_skipped = "skipped" in result.get("free_threaded", {"skipped": "absent"})
    for model, ratios in sorted(baseline.get("ratios", {}).items()):
        for name, expected in sorted(ratios.items()):
            actual = result.get(model, {}).get(name)
            if actual is None and not guarded(name) and ft_skipped:
                lines.append(f"skip {model}.{name}: the free_threaded mode did not run")
                continue
            if actual is None:
                ok = False
                lines.append(f"FAIL {model}.{name}: missing (baseline {expected:.3f})")
                continue
            floor = expected * (1 - threshold)
            change = actual / expected - 1
            if actual < floor:
                ok = False
                lines.append(f"FAIL {model}.{name}: {actual:.3f} is {-change:.1%} below "
                             f"baseline {expected:.3f} (threshold {threshold:.0%})")
            else:
                lines.append(f"ok   {model}.{name}: {actual:.3f} vs baseline {expected:.3f} "
                             f"({change:+.1%})")
    return ok, lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="RESULT.json ... BASELINE.json")
    parser.add_argument("--threshold", type=float, default=None,
                        help=f"relative drop that fails (default: the baseline's, else "
                             f"{DEFAULT_THRESHOLD})")
    parser.add_argument("--update", action="store_true", help="write the result's ratios "
                        "into the baseline instead of checking")
    parser.add_argument("--report", action="store_true",
                        help="print the comparison but do not fail on a ratio")
    parser.add_argument("--models", default=None,
                        help="with --update: only these models (comma-separated)")
    args = parser.parse_args(argv)
    if len(args.files) < 2 or (len(args.files) > 2 and not args.update):
        parser.error("give one RESULT.json and the BASELINE.json (several results only "
                     "with --update)")
    *result_paths, baseline_path = args.files
    results = []
    for path in result_paths:
        with open(path) as f:
            results.append(json.load(f))
    if args.update:
        baseline = {"threshold": args.threshold or DEFAULT_THRESHOLD,
                    "measured": measured_on(results),
                    "ratios": floor_ratios([baseline_ratios(r) for r in results])}
        if args.models:
            keep = args.models.split(",")
            baseline["ratios"] = {m: v for m, v in baseline["ratios"].items() if m in keep}
        with open(baseline_path, "w") as f:
            json.dump(baseline, f, indent=2)
            f.write("\n")
        print(f"wrote {baseline_path} from {len(results)} result(s)")
        return 0
    result = results[0]
    with open(baseline_path) as f:
        baseline = json.load(f)
    threshold = args.threshold or baseline.get("threshold", DEFAULT_THRESHOLD)
    ok, lines = compare(result, baseline, threshold)
    print("\n".join(lines))
    if args.report:
        print("bench-check (report only): " + ("all ratios hold" if ok else
                                               "some ratios are below their baseline"))
        return 0
    print("bench-check: " + ("all ratios hold" if ok else "REGRESSION"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
