"""make fuzz: runs every libFuzzer target of a clang sanitizer build (bin/*_fuzzer) for
--seconds each over its corpus, and summarises: executions, coverage (edges: libFuzzer's
`cov`, and features: `ft`), corpus size, crashes (a crash, leak, timeout or out-of-memory
leaves an artifact and a non-zero exit). Writes BUILD/fuzz-summary.json; exits non-zero if
any target found something.

    python tools/fuzz.py BUILD [--seconds 600] [TARGET ...]
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys


def run(fuzzer, build, seconds):
    name = os.path.basename(fuzzer)
    corpus = os.path.join(build, "fuzz-corpus", name)
    os.makedirs(corpus, exist_ok=True)
    prefix = os.path.join(build, f"fuzz-{name}-")
    for old in glob.glob(prefix + "*"):
        os.remove(old)
    process = subprocess.run(
        [fuzzer, f"-max_total_time={seconds}", "-rss_limit_mb=4096", "-timeout=10",
         "-print_final_stats=1", f"-artifact_prefix={prefix}", corpus],
        capture_output=True, text=True,
        env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "halt_on_error=1"})
    log = process.stderr
    with open(os.path.join(build, f"fuzz-{name}.log"), "w") as out:
        out.write(log)
    progress = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", log, re.MULTILINE)
    executed = re.search(r"stat::number_of_executed_units: (\d+)", log)
    artifacts = glob.glob(prefix + "*")
    last = [int(n) for n in progress[-1]] if progress else [0, 0, 0, 0]
    return {
        "target": name,
        "seconds": seconds,
        "executions": int(executed.group(1)) if executed else last[0],
        "coverage_edges": last[1],
        "features": last[2],
        "corpus": last[3],
        "crashes": len(artifacts) + (1 if process.returncode != 0 and not artifacts else 0),
        "artifacts": artifacts,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build")
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("targets", nargs="*", help="fuzzers to run (default: every one)")
    args = parser.parse_intermixed_args()
    fuzzers = sorted(glob.glob(os.path.join(args.build, "bin", "*_fuzzer")))
    if not fuzzers:
        sys.exit(f"fuzz: no fuzzers in {args.build}/bin (a clang sanitizer build makes them)")
    unknown = set(args.targets) - {os.path.basename(f) for f in fuzzers}
    if unknown:
        sys.exit(f"fuzz: no fuzzer named {', '.join(sorted(unknown))} in {args.build}/bin")
    if args.targets:
        fuzzers = [f for f in fuzzers if os.path.basename(f) in args.targets]
    results = []
    for fuzzer in fuzzers:
        result = run(fuzzer, args.build, args.seconds)
        results.append(result)
        found = f"  ({', '.join(result['artifacts'])})" if result["artifacts"] else ""
        print(f"{result['target']:<20} {result['executions']:>12,} runs"
              f"  cov {result['coverage_edges']:>6}  ft {result['features']:>6}"
              f"  corpus {result['corpus']:>6}  crashes {result['crashes']}{found}", flush=True)
    with open(os.path.join(args.build, "fuzz-summary.json"), "w") as out:
        json.dump(results, out, indent=2)
    sys.exit(1 if any(r["crashes"] for r in results) else 0)


if __name__ == "__main__":
    main()
