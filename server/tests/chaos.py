"""The chaos run: a supervised chorus-server under every kind of call at once while a
poison request kills it, until the poison model is quarantined.

8 clients call every inference RPC chorus implements (retrying on UNAVAILABLE, as a
client of a restarting server must) and check every answer; one thread loads and
unloads a model; one creates, steps, checkpoints and deletes training jobs; one scrapes
/metrics; the main thread sends the poison request three times. A request is lost when
no retry got a correct answer. Used by test_chaos.py (asserts) and by `make bench-serve`
(figures): `python chaos.py --out chaos.json`.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import servable_models  # noqa: E402
from chorus.client import ClientError  # noqa: E402
from chorus.client.training import TrainingClient  # noqa: E402
from conftest import ServerProcess, ThreadGroup, metric, package  # noqa: E402
from training_specs import package_tiny_llama, spec  # noqa: E402

CLIENTS = 8
RETRY_FOR_S = 90  # a request is lost when no retry within this got an answer


class Tally:
    """Counts of what happened, from every thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counts = {"requests": 0, "lost": 0, "retries": 0, "training_cycles": 0,
                       "load_unload_cycles": 0, "scrapes": 0}
        self.losses = []  # (what, why) of each lost request, for the report

    def add(self, key, n=1):
        with self._lock:
            self.counts[key] += n

    def lose(self, what, why):
        with self._lock:
            self.counts["lost"] += 1
            self.losses.append(f"{what}: {why}")


def retrying(tally, what, call, check=lambda answer: None):
    """One request: call() until it is not UNAVAILABLE; check(answer) says what is wrong
    with an answer (None: right). Counts it, and loses it if it never got a right answer."""
    tally.add("requests")
    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        try:
            answer = call()
        except ClientError as e:
            if e.code == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline:
                tally.add("retries")
                time.sleep(0.1)
                continue
            tally.lose(what, f"{e.code.name}: {e.message}")
            return None
        wrong = check(answer)
        if wrong:
            tally.lose(what, wrong)
        return answer


def expect_close(expected):
    def check(outputs):
        (output,) = outputs.values()
        if not np.allclose(output, expected, rtol=1e-5, atol=1e-6):
            return f"wrong answer {output!r}, expected {expected!r}"
        return None
    return check


def make_repository(root):
    """mlp (batching), steady, churn (loaded and unloaded), crashy (the poison)."""
    torch.manual_seed(0)
    mlp = servable_models.TwoLayer()
    models = {"mlp": (mlp, dict(max_batch_size=64)),
              "steady": (servable_models.Scale(3.0), dict(batchable=False)),
              "churn": (servable_models.Scale(5.0), dict(batchable=False)),
              "crashy": (servable_models.Crasher(), dict(batchable=False))}
    repo = os.path.join(root, "repository")
    for name, (model, options) in models.items():
        os.makedirs(os.path.join(repo, name, "1"))
        package(os.path.join(repo, name, "1", "model.pt"), model, torch.zeros(1, 4), name,
                **options)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    with torch.no_grad():
        mlp_expected = mlp(torch.from_numpy(x)).numpy()
    return repo, x, mlp_expected


def inference_client(server, tally, stop, index, x, mlp_expected):
    """Every inference RPC in turn, each answer checked."""
    ones = np.ones((1, 4), np.float32)
    with server.client() as client:
        calls = [
            ("ServerLive", client.live, lambda live: None if live else "not live"),
            ("ServerReady", client.ready, lambda ready: None),  # false while restarting
            ("ModelReady", lambda: client.ready("mlp"), lambda ready: None),
            ("ServerMetadata", client.server_metadata,
             lambda m: None if m.name == "chorus" else f"server name {m.name!r}"),
            ("ModelMetadata", lambda: client.metadata("mlp"),
             lambda m: None if [t.name for t in m.inputs] == ["x"] else f"inputs {m.inputs}"),
            ("ModelInfer mlp", lambda: client.infer("mlp", {"x": x}, timeout=30),
             expect_close(mlp_expected)),
            ("ModelInfer steady", lambda: client.infer("steady", {"x": ones}, timeout=30),
             expect_close(3 * ones)),
            ("ModelStatistics", lambda: client.statistics("mlp"),
             lambda s: None if s.model_stats else "no statistics"),
            ("RepositoryIndex", client.models,
             lambda index: None if "mlp" in [m.name for m in index] else "mlp not listed"),
        ]
        turn = index
        while not stop.is_set():
            what, call, check = calls[turn % len(calls)]
            retrying(tally, what, call, check)
            turn += 1
            time.sleep(0.01)


def load_unload(server, tally, stop):
    ones = np.ones((1, 4), np.float32)
    with server.client() as client:
        while not stop.is_set():
            retrying(tally, "RepositoryModelUnload churn", lambda: client.unload("churn"))
            time.sleep(0.3)
            retrying(tally, "RepositoryModelLoad churn", lambda: client.load("churn"))
            retrying(tally, "ModelInfer churn",
                     lambda: client.infer("churn", {"x": ones}, timeout=30),
                     expect_close(5 * ones))
            tally.add("load_unload_cycles")
            time.sleep(0.3)


def training_cycle(client, tally, archive, name, directory):
    """A job with a checkpoint directory: create, step, save, stats, delete. A create
    whose answer a crash took may still have made the job (it is resumed after the
    restart): each attempt first deletes any job of its name (UNAVAILABLE while resuming)."""
    def create():
        for job in client.list_jobs():
            if job.name == name:
                client.delete(job.job_id)
        return client.create_job(**spec(archive, name=name, checkpoint_dir=directory,
                                         checkpoint_interval=2))

    def delete():
        try:
            client.delete(job)
        except ClientError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:  # a retry of a delete that ran
                raise

    job = retrying(tally, "CreateJob", create)
    if job is None:
        return
    retrying(tally, "Step", lambda: client.step(job, 3),
             lambda steps: None if steps and np.isfinite(steps[-1].loss) else f"steps {steps}")
    # A crash since Step answered takes the job back to its last checkpoint (step 2).
    retrying(tally, "SaveCheckpoint", lambda: client.save(job, ""),
             lambda saved: None if saved.step >= 2 else f"saved step {saved.step}")
    retrying(tally, "GetStats", lambda: client.stats(job),
             lambda stats: None if stats.name == name else f"stats of {stats.name}")
    retrying(tally, "DeleteJob", delete)
    retrying(tally, "ListJobs", client.list_jobs,
             lambda jobs: None if name not in [j.name for j in jobs] else "still listed")
    tally.add("training_cycles")


def training(server, tally, stop, archive, checkpoints):
    with TrainingClient(server.address) as client:
        cycle = 0
        while not stop.is_set():
            cycle += 1
            training_cycle(client, tally, archive, f"chaos-{cycle}",
                           os.path.join(checkpoints, f"chaos-{cycle}"))


def scraper(server, tally, stop):
    while not stop.is_set():
        def scrape():
            try:
                text = urllib.request.urlopen(
                    f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read()
            except OSError as e:  # the serving process is restarting
                raise ClientError(grpc.StatusCode.UNAVAILABLE, str(e)) from None
            return text.decode()

        retrying(tally, "GET /metrics", scrape,
                 lambda text: None if "nv_inference_request_success" in text else
                 "no inference metrics")
        tally.add("scrapes")
        time.sleep(0.5)


class Workload(ThreadGroup):
    """Every client thread of the run, started together and stopped together."""

    def __init__(self, server, tally, x, mlp_expected, archive, checkpoints):
        super().__init__()
        args = (server, tally, self.stop)
        self.threads = [threading.Thread(target=inference_client, args=(*args, i, x, mlp_expected))
                        for i in range(CLIENTS)]
        self.threads += [threading.Thread(target=load_unload, args=args),
                         threading.Thread(target=training, args=(*args, archive, checkpoints)),
                         threading.Thread(target=scraper, args=args)]


def send_poison(server, attempt):
    """What the poison request's caller saw."""
    with server.client() as client:
        poison = client.make_request("crashy", {"x": np.full((1, 4), 13.0, np.float32)},
                                     request_id=f"poison-{attempt}")
        try:
            client.infer_request(poison, timeout=60)
            return "answered"
        except ClientError as e:
            return f"{e.code.name}: {e.message}"


def quiet_rss_mib(server):
    """The serving process's RSS once the load has stopped and it has settled: the
    server hands free memory back after a quiet second (--idle-memory-release-ms), so
    the first reading comes after two, and the lowest of three is taken (a reading
    taken before the release counted the allocator's free arenas: +5 % of noise)."""
    time.sleep(2.5)
    readings = []
    for _ in range(3):
        readings.append(server.serving_memory_mib("VmRSS"))
        time.sleep(0.5)
    return min(readings)


def run(workdir, seconds=90.0, interpreters=2, warmup_seconds=15.0):
    """The chaos run; returns its figures (see the module's doc). RSS is compared at rest:
    after a warm-up with the same load (every kind of call, training cycles, so that
    caches and the allocator's arenas have grown to it), and after the run."""
    repo, x, mlp_expected = make_repository(workdir)
    archive = package_tiny_llama(os.path.join(workdir, "llama3.pt"))
    checkpoints = os.path.join(workdir, "checkpoints")
    server = ServerProcess(repo, interpreters=interpreters)  # supervised
    tally, poisons = Tally(), []
    try:
        with Workload(server, Tally(), x, mlp_expected, archive, checkpoints):
            time.sleep(warmup_seconds)
        rss_first = quiet_rss_mib(server)
        start = time.monotonic()
        with Workload(server, tally, x, mlp_expected, archive, checkpoints):
            for attempt in range(1, 4):
                time.sleep(max(0.0, start + seconds * attempt / 4 - time.monotonic()))
                poisons.append(send_poison(server, attempt))
            time.sleep(max(0.0, start + seconds - time.monotonic()))
        elapsed = time.monotonic() - start
        rss_last = quiet_rss_mib(server)
        with server.client() as client:
            quarantined = [m for m in client.models() if m.name == "crashy"]
            crashy_ready = client.ready("crashy")
        restarts = metric(server.metrics(), "chorus_server_restarts_total")
    finally:
        exit_status = server.stop()
    return {**tally.counts,
            "seconds": round(elapsed, 1),
            "clients": CLIENTS,
            "restarts": int(restarts) if restarts is not None else None,
            "poison": poisons,
            "poison_quarantined": bool(quarantined and not crashy_ready and
                                       "quarantined" in quarantined[0].reason),
            "rss_first_mib": round(rss_first, 1),
            "rss_last_mib": round(rss_last, 1),
            "rss_change_pct": round(100 * (rss_last - rss_first) / rss_first, 2),
            "exit_status": exit_status,
            "lost_requests": tally.losses[:20]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file for the figures")
    parser.add_argument("--seconds", type=float, default=90.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chorus-chaos-") as workdir:
        figures = run(workdir, args.seconds)
    with open(args.out, "w") as out:
        json.dump(figures, out, indent=2)
    print(json.dumps({k: v for k, v in figures.items() if k != "lost_requests"}))


if __name__ == "__main__":
    main()
