"""The one load generator of make bench-density, the same for every stack:
plain HTTP/1.1 keep-alive requests from threads of this (torch-free) process.

  wait_all_ready   from a stack's start until every model of the fleet has
                   answered correctly once (its answer's bytes match the
                   reference output within fp32 tolerance)
  run_load         `threads` clients, each going round the whole fleet from
                   its own offset, for `seconds`: every model under load
"""

import threading
import time

import numpy as np

from fleet_stacks import Connections
from servers import answers_match  # the peers benchmark's check (fleet_stacks puts it on the path)


def read_fleet(prepared):
    """{model: (input bytes, expected output array)}."""
    fleet = {}
    for name, spec in prepared.items():
        with open(spec["input_bin"], "rb") as f:
            payload = f.read()
        expected = np.fromfile(spec["expected_bin"], dtype=np.float32)
        fleet[name] = (payload, expected)
    return fleet


class OutOfMemory(RuntimeError):
    """The machine ran low on memory before every model answered."""


def available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def wait_all_ready(stack, prepared, fleet, started, timeout_s, alive, floor_mib=1024):
    """Seconds from `started` until every model answered correctly; raises past
    `timeout_s` or when `alive()` turns false, OutOfMemory when the machine's
    available memory falls under `floor_mib` first (the stack does not fit)."""
    pending = list(prepared)
    connections = Connections(timeout_s=30.0)
    last_error = None
    while pending:
        for name in list(pending):
            payload, expected = fleet[name]
            try:
                raw = stack.request(connections, name, prepared[name], payload)
            except (RuntimeError, OSError) as e:
                last_error = e
                connections.close()
                continue
            if not answers_match(raw, prepared[name]["expected_bin"]):
                raise RuntimeError(f"{stack.kind}: {name}'s answer differs from the model's")
            pending.remove(name)
        if pending:
            if available_mib() < floor_mib:
                raise OutOfMemory(f"{stack.kind}: under {floor_mib} MiB available with "
                                  f"{len(prepared) - len(pending)} of {len(prepared)} "
                                  f"models answering")
            if time.monotonic() - started > timeout_s or not alive():
                raise RuntimeError(f"{stack.kind}: {len(pending)} models never answered "
                                   f"({pending[:3]}...): {last_error}")
            time.sleep(0.05)
    connections.close()
    return time.monotonic() - started


def run_load(stack, prepared, fleet, threads, seconds):
    """Requests per second over the fleet with `threads` clients; latencies, errors."""
    names = list(prepared)
    latencies = [[] for _ in range(threads)]
    errors = [0] * threads
    stop_at = time.monotonic() + seconds

    def client(t):
        connections = Connections()
        i = t * len(names) // threads
        while time.monotonic() < stop_at:
            name = names[i % len(names)]
            i += 1
            payload, expected = fleet[name]
            began = time.monotonic()
            try:
                raw = stack.request(connections, name, prepared[name], payload)
                if len(raw) != expected.nbytes:
                    raise RuntimeError("wrong answer size")
                latencies[t].append(time.monotonic() - began)
            except (RuntimeError, OSError):
                errors[t] += 1
        connections.close()

    began = time.monotonic()
    workers = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - began
    done = sorted(x for per in latencies for x in per)
    return {"requests_per_s": round(len(done) / elapsed, 1), "requests": len(done),
            "errors": sum(errors), "threads": threads,
            "p50_ms": round(1000 * done[len(done) // 2], 2) if done else None,
            "p99_ms": round(1000 * done[int(len(done) * 0.99)], 2) if done else None}
