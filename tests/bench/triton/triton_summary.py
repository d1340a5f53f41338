"""make bench-triton's figures: from the cells of one run, the ratios of chorus over
Triton (each taken within a round, where both servers ran seconds apart, then the median
over the rounds), the BLS overhead, memory, start-up, the density fleet, and the issue's
goals."""

import operator

# (dotted key into the result, comparison, threshold, the key's measured bound: what
# it would be for a server costing nothing beyond the model's own execute() and the
# transport's floor, the echo's latency or CPU per request; None where nothing bounds it)
GOALS = [
    ("identity.p50_vs_triton", "<=", 0.4, "identity.execute_floor_vs_triton"),
    ("pyloop.throughput_vs_triton", ">=", 1.6, "pyloop.bound_vs_triton"),
    ("mlp.throughput_vs_triton", ">=", 1.5, "mlp.bound_vs_triton"),
    ("resnet18_b8.throughput_vs_triton", ">=", 1.1, "resnet18_b8.bound_vs_triton"),
    ("bls.added_vs_triton", "<=", 0.1, None),
    ("footprint_vs_triton", ">=", 3.0, None),
    ("density.{M}.footprint_vs_triton", ">=", 20.0, None),
    ("density.{M}.ready_vs_triton", ">=", 10.0, None),
    ("density.{M}.growth_2_instances.chorus", "<", 0.10, None),
    ("same_repository", "==", True, None),
]
SERVERS = ("chorus", "triton")
# measure_cpu's parts of the machine's CPU per request (microseconds)
CPU_PARTS = ("server_us", "models_us", "client_us", "other_us", "total_us")
COMPARE = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, "==": operator.eq}


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2


def rounded(value, digits=3):
    return None if value is None else round(value, digits)


def _load(cell, row, concurrency):
    """perf_analyzer's figures for one row and concurrency of a server's cell, or None."""
    figures = cell.get("rows", {}).get(row, {}).get(str(concurrency))
    return figures if figures and "throughput_per_s" in figures else None


def row_ratios(rounds, row, concurrencies):
    """{concurrency: ratios and both servers' median figures} of one row over the rounds
    ({round: {kind: cell}})."""
    by = {}
    for c in concurrencies:
        pairs = [(_load(r["chorus"], row, c), _load(r["triton"], row, c))
                 for r in rounds.values()]
        pairs = [(a, b) for a, b in pairs if a and b]
        if not pairs:
            continue
        entry = {
            "throughput_vs_triton": rounded(median(
                [a["throughput_per_s"] / b["throughput_per_s"] for a, b in pairs])),
            "p50_vs_triton": rounded(median([a["p50_ms"] / b["p50_ms"] for a, b in pairs])),
            "p99_vs_triton": rounded(median([a["p99_ms"] / b["p99_ms"] for a, b in pairs])),
            "rounds": len(pairs)}
        for i, kind in enumerate(SERVERS):
            entry[kind] = {
                "throughput_per_s": rounded(median([p[i]["throughput_per_s"] for p in pairs]), 2),
                "p50_us": rounded(median([1000 * p[i]["p50_ms"] for p in pairs]), 1),
                "p99_us": rounded(median([1000 * p[i]["p99_ms"] for p in pairs]), 1)}
        by[str(c)] = entry
    return by


def bls_added(cell, concurrency="1"):
    """(client-side, server-side) microseconds a BLS request adds over its two models:
    the pipeline's p50 minus identity's and mlp's p50s (each measured on its own), and
    the pipeline's mean request time at the server minus those of the two calls it made
    (the server's statistics during the pipeline's measurement)."""
    loads = [_load(cell, row, concurrency) for row in ("bls", "identity", "mlp")]
    if not all(loads):
        return None, None
    client = 1000 * (loads[0]["p50_ms"] - loads[1]["p50_ms"] - loads[2]["p50_ms"])
    stats = loads[0].get("server", {})
    server = None
    if all(m in stats for m in ("bls", "identity", "mlp")):
        server = (stats["bls"]["request_us"] - stats["identity"]["request_us"]
                  - stats["mlp"]["request_us"])
    return client, server


def bls_ratios(chorus_added, triton_added):
    """The per-round ratios `bls.added_vs_triton` is the median of: chorus' added time
    over Triton's, in the rounds where both were measured and Triton's is above zero."""
    return [a / b for a, b in zip(chorus_added, triton_added)
            if a is not None and b is not None and b > 0]


def bls_summary(rounds):
    added = {kind: [] for kind in SERVERS}
    server = {kind: [] for kind in SERVERS}
    for r in rounds.values():
        got = {kind: bls_added(r[kind]) for kind in SERVERS}
        for kind in SERVERS:
            added[kind].append(got[kind][0])
            server[kind].append(got[kind][1])
    ratios = bls_ratios(added["chorus"], added["triton"])
    return {"added_us": {kind: rounded(median(added[kind]), 1) for kind in SERVERS},
            "added_vs_triton": rounded(median(ratios)),
            "server_added_us": {kind: rounded(median(server[kind]), 1) for kind in SERVERS},
            "rounds": {kind: [rounded(v, 1) for v in added[kind]] for kind in SERVERS}}


def identity_floor(rounds, floors, execute_us=None):
    """identity at c1 against the floor under it (the echo of each round): the floor's
    p50, Triton's and chorus' p50 over it, and the floor over Triton's (what
    p50_vs_triton would be for a server costing nothing beyond gRPC and one thread hop);
    with `execute_us` (one bare execute() call), the same for the floor plus the model's
    own execute(), which every server runs per request."""
    floor_us, vs_triton, chorus_vs, with_execute = [], [], [], []
    for r, pair in rounds.items():
        echo = (floors.get(r) or {}).get("1")
        chorus = _load(pair.get("chorus", {}), "identity", 1)
        triton = _load(pair.get("triton", {}), "identity", 1)
        if not echo or "p50_ms" not in echo:
            continue
        floor_us.append(1000 * echo["p50_ms"])
        if triton:
            vs_triton.append(echo["p50_ms"] / triton["p50_ms"])
            if execute_us is not None:
                with_execute.append((1000 * echo["p50_ms"] + execute_us)
                                    / (1000 * triton["p50_ms"]))
        if chorus:
            chorus_vs.append(chorus["p50_ms"] / echo["p50_ms"])
    entry = {"floor_us": rounded(median(floor_us), 1),
             "floor_vs_triton": rounded(median(vs_triton)),
             "p50_vs_floor": rounded(median(chorus_vs))}
    if execute_us is not None and floor_us:
        entry["execute_floor_us"] = rounded(median(floor_us) + execute_us, 1)
        entry["execute_floor_vs_triton"] = rounded(median(with_execute))
    return entry


def row_cpu(rounds, row, concurrency):
    """{server: its CPU per request at `concurrency` by part (measure_cpu's), the medians
    over the rounds}."""
    by_kind = {}
    for kind in SERVERS:
        loads = [_load(r.get(kind, {}), row, concurrency) for r in rounds.values()]
        cpus = [figures["cpu"] for figures in loads
                if figures and "total_us" in figures.get("cpu", {})]
        if cpus:
            by_kind[kind] = {part: rounded(median([c[part] for c in cpus]), 1)
                             for part in CPU_PARTS}
    return by_kind


def transport_floor(floors, concurrency):
    """The machine's CPU per request while the echo answers identity at `concurrency`
    (client, echo, kernel: what serving a request over gRPC costs at least), and the
    echo's throughput there; medians over the rounds."""
    loads = [(f or {}).get(str(concurrency)) for f in floors.values()]
    loads = [figures for figures in loads if figures and "total_us" in figures.get("cpu", {})]
    if not loads:
        return {}
    return {"cpu_us": rounded(median([f["cpu"]["total_us"] for f in loads]), 1),
            "echo_per_s": rounded(median([f["throughput_per_s"] for f in loads]), 1),
            "concurrency": concurrency}


def row_ceiling(ceiling, at_c, transport_us=None, cores=None):
    """A row's ceiling (run_ceilings') against Triton's throughput at the top concurrency:
    the ceiling, one execute()'s time and ceiling_vs_triton; with the transport's CPU per
    request, the bound: the items per second `cores` could serve if each cost its
    execute() (the ceiling's processes' CPU per item) plus the transport's floor, and
    bound_vs_triton (the largest throughput_vs_triton any server reaches here)."""
    if not ceiling or "error" in ceiling:
        return {}
    entry = {"ceiling_per_s": ceiling["throughput_per_s"], "execute_us": ceiling["execute_us"]}
    triton = (at_c or {}).get("triton", {}).get("throughput_per_s")
    if triton:
        entry["ceiling_vs_triton"] = rounded(ceiling["throughput_per_s"] / triton)
    if transport_us and cores:
        busy = min(ceiling.get("processes", cores), cores)
        item_s = busy / ceiling["throughput_per_s"] + 1e-6 * transport_us / ceiling["batch"]
        entry["bound_per_s"] = rounded(cores / item_s, 1)
        if triton:
            entry["bound_vs_triton"] = rounded(cores / item_s / triton)
    return entry


def start_and_memory(rounds):
    """Memory (summed PSS, distinct pages, processes) and time to ready, both servers,
    with the ratios Triton's over chorus' (per round, then the median)."""
    both = [r for r in rounds.values()
            if all("memory" in r[kind] and "ready_s" in r[kind] for kind in SERVERS)]
    if not both:
        return None
    entry = {
        "footprint_vs_triton": rounded(median(
            [r["triton"]["memory"]["pss_mib"] / r["chorus"]["memory"]["pss_mib"]
             for r in both])),
        "ready_vs_triton": rounded(median(
            [r["triton"]["ready_s"] / r["chorus"]["ready_s"] for r in both]))}
    unique = [r for r in both if all("unique_mib" in r[k]["memory"] for k in SERVERS)]
    if unique:
        entry["footprint_unique_vs_triton"] = rounded(median(
            [r["triton"]["memory"]["unique_mib"] / r["chorus"]["memory"]["unique_mib"]
             for r in unique]))
    for kind in SERVERS:
        entry[kind] = {
            "pss_mib": rounded(median([r[kind]["memory"]["pss_mib"] for r in both]), 1),
            "rss_mib": rounded(median([r[kind]["memory"]["rss_mib"] for r in both]), 1),
            "processes": len(both[0][kind]["memory"]["processes"]),
            "ready_s": rounded(median([r[kind]["ready_s"] for r in both]), 2)}
    return entry


def fleet_summary(by_count, instances):
    """One fleet size: {instance count: both cells' figures and ratios}, the ratios at 1
    instance each at the top, and how much each server grows from 1 to `instances`."""
    entry = {"by_instances": {}}
    for n, cells in by_count.items():
        chorus, triton = cells.get("chorus", {}), cells.get("triton", {})
        ratios = {"triton_fits": triton.get("fits"),
                  "triton_estimated": bool(triton.get("pss_mib_estimated"))}
        if chorus.get("pss_mib") and triton.get("pss_mib"):
            ratios["footprint_vs_triton"] = rounded(triton["pss_mib"] / chorus["pss_mib"])
        if chorus.get("ready_s") and triton.get("ready_s"):
            ratios["ready_vs_triton"] = rounded(triton["ready_s"] / chorus["ready_s"])
        if chorus.get("load") and triton.get("load"):
            ratios["throughput_vs_triton"] = rounded(
                chorus["load"]["requests_per_s"] / max(1e-9, triton["load"]["requests_per_s"]))
        for kind, cell in (("chorus", chorus), ("triton", triton)):
            ratios[kind] = {key: cell.get(key) for key in ("pss_mib", "ready_s", "processes")}
            ratios[kind]["requests_per_s"] = (cell.get("load") or {}).get("requests_per_s")
        entry["by_instances"][n] = ratios
    one = entry["by_instances"].get("1", {})
    for key in ("footprint_vs_triton", "ready_vs_triton", "throughput_vs_triton"):
        entry[key] = one.get(key)
    many = entry["by_instances"].get(str(instances), {})
    entry["growth_2_instances"] = {
        kind: (rounded(many[kind]["pss_mib"] / one[kind]["pss_mib"] - 1)
               if one.get(kind, {}).get("pss_mib") and many.get(kind, {}).get("pss_mib")
               else None)
        for kind in SERVERS}
    return entry


def same_repository(result):
    """Whether every pair of cells compared served one folder (the same files)."""
    pairs = [r for rounds in result["cells"].values() for r in rounds.values()]
    pairs += [cells for sizes in result.get("fleet_cells", {}).values()
              for cells in sizes.values()]
    folders = [{c.get("repository") for c in pair.values() if c.get("repository")}
               for pair in pairs]
    return bool(folders) and all(len(f) == 1 for f in folders)


def lookup(result, key):
    value = result
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def goals(result):
    sizes = sorted(int(m) for m in result.get("density", {}))
    met = []
    for key, comparison, threshold, bound_key in GOALS:
        if "{M}" in key:
            if not sizes:
                continue
            key = key.replace("{M}", str(sizes[-1]))
        value = lookup(result, key)
        ok = value is not None and COMPARE[comparison](value, threshold)
        entry = {"key": key, "goal": f"{comparison} {threshold}", "value": value, "met": ok}
        bound = lookup(result, bound_key) if bound_key else None
        if bound is not None:
            entry.update(bound_key=bound_key, bound=bound,
                         reachable=COMPARE[comparison](bound, threshold))
        met.append(entry)
    return met


def summarize(result, instances, rows):
    """Adds the headline figures (the issue's keys) and the goals to `result`."""
    top = str(2 * instances)
    by_instances = {}
    for n, rounds in result["cells"].items():
        concurrencies = [1, 2 * instances]
        by_instances[n] = {row: row_ratios(rounds, row, concurrencies) for row in rows}
        by_instances[n]["memory"] = start_and_memory(rounds)
    result["by_instances"] = by_instances
    at_n = by_instances.get(str(instances), {})
    result["transport"] = transport_floor(result.get("floor_cells", {}), int(top))
    cores = result.get("settings", {}).get("cores")
    for row in rows:
        by_c = at_n.get(row, {})
        result[row] = {
            "throughput_vs_triton": by_c.get(top, {}).get("throughput_vs_triton"),
            "p50_vs_triton": by_c.get("1", {}).get("p50_vs_triton"),
            "p99_vs_triton": by_c.get(top, {}).get("p99_vs_triton"),
            "at_instances": instances, "throughput_at_concurrency": int(top)}
        result[row]["cpu_us"] = row_cpu(result["cells"].get(str(instances), {}), row, top)
        result[row].update(row_ceiling(result.get("ceiling_cells", {}).get(row), by_c.get(top),
                                       result["transport"].get("cpu_us"), cores))
    if str(instances) in result["cells"]:
        result.setdefault("bls", {}).update(bls_summary(result["cells"][str(instances)]))
        if "identity" in result:
            result["identity"].update(identity_floor(
                result["cells"][str(instances)], result.get("floor_cells", {}),
                result["identity"].get("execute_us")))
    memory = at_n.get("memory") or {}
    result["footprint_vs_triton"] = memory.get("footprint_vs_triton")
    result["ready_vs_triton"] = memory.get("ready_vs_triton")
    result["density"] = {m: fleet_summary(by_count, instances)
                         for m, by_count in result.get("fleet_cells", {}).items()}
    result["same_repository"] = same_repository(result)
    result["goals"] = goals(result)
    return result
