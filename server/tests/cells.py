"""The cells run: chorus-server with --cells 2 --spare under steady tritonclient traffic
while a poison request kills one cell.

Clients (each its own gRPC connection, so each reaches one cell) call a good model
that answers with its process id, without retries; a poison client on one cell sends
a request that segfaults it. Measured: requests refused or broken beyond the ones in
flight on the dead cell (goal 0), seconds from the cell's death until its replacement
(the spare) listens, and the memory of 2 cells against 1 (proportional set sizes: shared
pages counted once over all processes). Used by test_cells.py (asserts) and by
`make bench-serve` (figures): `python cells.py --out cells.json`.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np
import torch
import tritonclient.grpc as triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import servable_models  # noqa: E402
from conftest import ServerProcess, ThreadGroup, package  # noqa: E402

POISON = 13.0  # servable_models.Crasher dereferences a null pointer


def make_repository(root):
    repo = os.path.join(root, "repository")
    for name, model in (("whoami", servable_models.WhoAmI()),
                        ("crashy", servable_models.Crasher())):
        os.makedirs(os.path.join(repo, name, "1"))
        package(os.path.join(repo, name, "1", "model.pt"), model, torch.zeros(1, 4), name,
                batchable=False)
    return repo


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(p) for p in listing.read().split()]


def preloaded(pid):
    """Whether `pid` is the supervisor's preloaded process (it forks serving processes)."""
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip() == "chorus-preload"


def serving_processes(supervisor):
    return [pid for pid in children(supervisor) if not preloaded(pid)]


def alive(pid):
    """Running (a zombie, dead but not yet reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def listeners(port):
    """Sockets listening on TCP `port` (each cell has its own, SO_REUSEPORT)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":
                    count += 1
    return count


def pss_mib(pids):
    """Proportional set size of `pids` together, in MiB."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total / 1024


def connect(server):
    """A client on a connection of its own (gRPC would share one between channels)."""
    return triton.InferenceServerClient(
        server.address, channel_args=[("grpc.use_local_subchannel_pool", 1)])


def call(client, model, value, timeout=30):
    x = np.full((1, 4), value, np.float32)
    inputs = [triton.InferInput("x", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(x)
    result = client.infer(model, inputs, client_timeout=timeout)
    return result.as_numpy(result.get_response().outputs[0].name)


def whoami(client):
    answer = call(client, "whoami", 1.5)
    assert answer[0, 0] == 3.0, answer
    return int(answer[0, 1])


def wait_ready(server, processes, deadline_s=300):
    """Until `processes` serving processes run and every one has loaded its models."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        log = server.log_text()
        loaded = log.count("model crashy version 1 loaded")
        if len(serving_processes(server.process.pid)) == processes and loaded >= processes:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{processes} serving processes were not ready:\n{server.log_text()}")


def spread_clients(server, cells, clients):
    """`clients` clients, at least two on each cell; returns [(client, cell pid)]."""
    made = []
    for _ in range(20 * clients):
        client = connect(server)
        made.append((client, whoami(client)))
        per_cell = {}
        for _, pid in made:
            per_cell[pid] = per_cell.get(pid, 0) + 1
        if len(per_cell) == cells and min(per_cell.values()) >= 2 and len(made) >= clients:
            return made
    raise RuntimeError(f"connections did not spread over {cells} cells: {per_cell}")


def footprint_of_one_cell(repo, interpreters):
    server = ServerProcess(repo, "--cells", "1", interpreters=interpreters)
    try:
        wait_ready(server, 1)
        client = connect(server)
        whoami(client)
        time.sleep(2)  # the idle memory release
        return pss_mib([server.process.pid, *children(server.process.pid)])
    finally:
        server.stop()


class Traffic(ThreadGroup):
    """Steady calls of each client, no retries: (client index, sent, answered, pid or error)."""

    def __init__(self, clients):
        super().__init__()
        self.clients = clients
        self.records = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(len(clients))]

    def _run(self, index):
        client = self.clients[index][0]
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                outcome = whoami(client)
            except Exception as error:  # noqa: BLE001 (tritonclient raises its own types)
                outcome = f"{type(error).__name__}: {error}"
            with self._lock:
                self.records.append((index, sent, time.monotonic(), outcome))
            time.sleep(0.005)


def kill_a_cell(server, poison_client, victim, port, cells):
    """Sends the poison on `poison_client` (its cell is `victim`); returns (seconds from
    its death until `cells` sockets listen again, the poison's error)."""
    died = {}

    def watch():
        while alive(victim):
            time.sleep(0.0005)
        died["at"] = time.monotonic()
        while listeners(port) < cells:
            time.sleep(0.0005)
        died["listening"] = time.monotonic()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        call(poison_client, "crashy", POISON)
        error = None
    except Exception as failure:  # noqa: BLE001
        error = str(failure)
    watcher.join(120)
    return died["listening"] - died["at"], error


def run(workdir, interpreters=1, clients=8, seconds=3.0):
    repo = make_repository(workdir)
    one_cell_mib = footprint_of_one_cell(repo, interpreters)
    server = ServerProcess(repo, "--cells", "2", "--spare", interpreters=interpreters)
    try:
        wait_ready(server, 3)
        supervisor = server.process.pid
        time.sleep(2)  # the idle memory release, in every process
        spare = [pid for pid in serving_processes(supervisor)
                 if f"the spare serving process {pid} started" in server.log_text()]
        # The supervisor, its preloaded process and the cells.
        two_cells_mib = pss_mib([pid for pid in [supervisor, *children(supervisor)]
                                 if pid not in spare])
        with_spare_mib = pss_mib([supervisor, *children(supervisor)])
        spread = spread_clients(server, 2, clients)
        poison_client = connect(server)
        victim = whoami(poison_client)
        with Traffic(spread) as traffic:
            time.sleep(1.0)
            to_listening_s, poison_error = kill_a_cell(
                server, poison_client, victim, server.port, 2)
            time.sleep(seconds)
        # The replacement answers: a new connection reaches each cell that listens.
        replacement = spare[0] if spare else None
        reached = {whoami(connect(server)) for _ in range(40)}
        figures = {
            "cells": 2,
            "interpreters_per_cell": interpreters,
            "clients": len(spread),
            "requests": len(traffic.records),
            "poison_error": poison_error,
            "restart_to_ready_s": to_listening_s,
            "spare_took_over": replacement is not None and replacement in reached,
            "footprint_one_cell_mib": one_cell_mib,
            "footprint_two_cells_mib": two_cells_mib,
            "footprint_two_cells_and_spare_mib": with_spare_mib,
            "footprint_vs_one_cell": two_cells_mib / one_cell_mib,
            "footprint_with_spare_vs_one_cell": with_spare_mib / one_cell_mib,
        }
        figures.update(tally(traffic.records, spread, victim))
        figures["log"] = server.log_text()
        figures["server"] = server
        figures["poison_client"] = poison_client
        return figures
    except BaseException:
        server.stop()
        raise


def tally(records, spread, victim):
    """Failures, split into the dead cell's own (each of its clients may lose the one
    request in flight on, or sent into, its broken connection) and the rest."""
    broken, refused, reasons = 0, 0, []
    errors = [0] * len(spread)
    for index, _, _, outcome in sorted(records, key=lambda record: record[1]):
        if isinstance(outcome, int):
            continue
        errors[index] += 1
        if spread[index][1] == victim and errors[index] == 1:
            broken += 1
        else:
            refused += 1
            reasons.append(outcome)
    survivors = [i for i, (_, pid) in enumerate(spread) if pid != victim]
    return {
        "dead_cell_connections_broken": broken,
        "refused_during_crash": refused,
        "refused_reasons": reasons[:5],
        "surviving_cell_errors": sum(errors[i] for i in survivors),
        "clients_on_dead_cell": len(spread) - len(survivors),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        figures = run(workdir, seconds=args.seconds)
        server = figures.pop("server")
        figures.pop("poison_client")
        figures.pop("log")
        server.stop()
    with open(args.out, "w") as out:
        json.dump(figures, out, indent=2)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
