"""Training jobs that span two chorus servers (separate processes, each its own
interpreters), driven through one of them: parity with one server and with a single
rank, checkpoints every host commits before `latest` moves, and a lost host.

Where the test may make network namespaces (root, iproute2), the second server runs in
its own, joined to the first by a veth pair with its own address, so nothing passes
between them but through the network; elsewhere both run on loopback. Each test
records which it ran (`record_property("network", ...)`)."""

import os
import signal
import subprocess
import time

import grpc
import numpy as np
import pytest

from chorus.client import ClientError
from chorus.client.training import TrainingClient
from conftest import ServerProcess, rpc_code
from training_specs import package_tiny_llama, spec

STEPS = 10
PROBE = np.arange(2 * 16, dtype=np.int64).reshape(2, 16) % 256


class VethPair:
    """A network namespace for the second server, joined to this one by a veth pair:
    10.213.1.1 here, 10.213.1.2 there. `ready` is False (with `why_not`) where the
    test may not make it."""

    def __init__(self):
        suffix = str(os.getpid() % 100000)
        self.namespace = f"chorus-peer-{suffix}"
        self.here, self.there = f"chvh-{suffix}", f"chvp-{suffix}"
        self.addresses = ("10.213.1.1", "10.213.1.2")
        commands = [
            ["ip", "netns", "add", self.namespace],
            ["ip", "link", "add", self.here, "type", "veth", "peer", "name", self.there,
             "netns", self.namespace],
            ["ip", "addr", "add", f"{self.addresses[0]}/24", "dev", self.here],
            ["ip", "-n", self.namespace, "addr", "add", f"{self.addresses[1]}/24", "dev",
             self.there],
            ["ip", "link", "set", self.here, "up"],
            ["ip", "-n", self.namespace, "link", "set", self.there, "up"],
            ["ip", "-n", self.namespace, "link", "set", "lo", "up"],
        ]
        self.ready, self.why_not = True, ""
        for command in commands:
            try:
                done = subprocess.run(command, capture_output=True, text=True)
                error = done.stderr.strip() if done.returncode != 0 else ""
            except OSError as e:  # no iproute2
                error = str(e)
            if error:
                self.ready = False
                self.why_not = f"`{' '.join(command)}`: {error}"
                self.close()
                return

    def cut(self):
        subprocess.run(["ip", "link", "set", self.here, "down"], check=True)

    def mend(self):
        subprocess.run(["ip", "link", "set", self.here, "up"], check=True)

    def close(self):
        for command in (["ip", "link", "del", self.here], ["ip", "netns", "del", self.namespace]):
            try:
                subprocess.run(command, capture_output=True)
            except OSError:
                pass


@pytest.fixture(scope="module")
def veth():
    pair = VethPair()
    yield pair
    if pair.ready:
        pair.close()


@pytest.fixture(scope="module")
def llama_archive(tmp_path_factory):
    return package_tiny_llama(tmp_path_factory.mktemp("llama") / "llama3.pt")


def start_pair(repository, veth, network):
    """Two servers of two interpreters: on loopback, or the second in its own namespace."""
    if network == "namespaces":
        if not veth.ready:
            pytest.skip(f"no network namespaces here ({veth.why_not}): the loopback run stands")
        driver = ServerProcess(repository, host=veth.addresses[0])
        peer = ServerProcess(repository, host=veth.addresses[1],
                             prefix=("ip", "netns", "exec", veth.namespace))
    else:
        driver, peer = ServerProcess(repository), ServerProcess(repository)
    return driver, peer


def train(client, archive, steps=STEPS, **overrides):
    """Losses of `steps` steps of a new job, its logits on PROBE and its stats; deleted."""
    job = client.create_job(**spec(archive, **overrides))
    try:
        metrics = client.step(job, steps)
        return [m.loss for m in metrics], client.evaluate(job, PROBE), client.stats(job), metrics
    finally:
        client.delete(job)


def create_once_restarted(client, job_spec, within_s=60):
    """The job, created as soon as every server of it is back (restarted or reachable)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return client.create_job(**job_spec)
        except ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def assert_close(losses, reference, what):
    assert len(losses) == len(reference), what
    for step, (a, b) in enumerate(zip(losses, reference)):
        assert abs(a - b) / abs(b) <= 1e-5, (what, step + 1, a, b)


@pytest.fixture(scope="module")
def one_server_figures(repository, llama_archive):
    """The references: one rank, and one server's four ranks."""
    server = ServerProcess(repository[0], interpreters=4)
    try:
        with TrainingClient(server.address) as client:
            single = train(client, llama_archive)
            four = train(client, llama_archive, dp_shard=4)
    finally:
        assert server.stop() == 0
    return single, four


@pytest.mark.parametrize("network", ["loopback", "namespaces"])
def test_two_servers_of_two_train_as_one_server_of_four_and_as_one_rank(
        repository, veth, llama_archive, one_server_figures, network, record_property):
    (single, single_logits, _, _), (four, four_logits, _, _) = one_server_figures
    assert single[-1] < 0.8 * single[0], single
    assert_close(four, single, "1 server x 4")
    driver, peer = start_pair(repository[0], veth, network)
    record_property("network", network)
    try:
        hosts = [driver.address, peer.address]
        with TrainingClient(driver.address) as client:
            runs = {layout: train(client, llama_archive, dp_shard=2, hosts=hosts, layout=layout)
                    for layout in ("fsdp", "hsdp")}
            # Tensor parallel inside each server, FSDP across them.
            tp_losses, tp_logits, tp_stats, _ = train(client, llama_archive, tp=2, hosts=hosts)
            assert not client.list_jobs()
        with TrainingClient(peer.address) as client:
            assert not client.list_jobs()  # the driver deleted the other host's part too
    finally:
        assert peer.stop() == 0 and driver.stop() == 0
    for layout, (losses, logits, stats, metrics) in runs.items():
        assert_close(losses, single, f"2 servers x 2, {layout}")
        assert_close(losses, four, f"2 servers x 2 vs 1 x 4, {layout}")
        np.testing.assert_allclose(logits, single_logits, rtol=1e-4, atol=1e-4)
        assert list(stats.hosts) == hosts and stats.host == 0 and stats.layout == layout
        assert stats.step == STEPS and len(stats.interpreters) == 2
        assert all(m.cross_host_bytes_per_host > 0 for m in metrics), layout
    assert_close(tp_losses, single, "2 servers x TP 2, FSDP across")
    np.testing.assert_allclose(tp_logits, single_logits, rtol=1e-4, atol=1e-4)
    assert tp_stats.tp == 2 and len(tp_stats.interpreters) == 2
    # HSDP sends gradients across once per step; FSDP also gathers parameters across.
    fsdp_bytes = runs["fsdp"][3][-1].cross_host_bytes_per_host
    hsdp_bytes = runs["hsdp"][3][-1].cross_host_bytes_per_host
    record_property("cross_host_mib_per_step", {"fsdp": fsdp_bytes / 2**20,
                                                "hsdp": hsdp_bytes / 2**20})
    assert hsdp_bytes < 0.6 * fsdp_bytes, (fsdp_bytes, hsdp_bytes)


def drive_one_job_across(client, other, driver, peer, archive, tmp_path):
    """A job on both servers, driven through the driver (`client`): the peer (`other`)
    refuses to drive it; step, save, load, evaluate and export run on both hosts."""
    job = client.create_job(**spec(archive, dp_shard=2, hosts=[driver.address, peer.address]))
    (listed,) = other.list_jobs()
    assert listed.job_id == job and listed.host == 1
    with pytest.raises(ClientError) as refused:
        other.step(job, 1)
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert driver.address in refused.value.message
    assert rpc_code(lambda: other.delete(job)) == grpc.StatusCode.FAILED_PRECONDITION
    steps = client.step(job, 2)
    assert len(steps) == 2  # the refusals left it whole
    gauge = f'chorus_training_cross_host_bytes_per_host{{job="{job}"}} '
    (line,) = [x for x in driver.metrics().splitlines() if x.startswith(gauge)]
    assert float(line.split()[-1]) == steps[-1].cross_host_bytes_per_host > 0
    saved = client.save(job, str(tmp_path / "ckpt"))
    assert saved.path.endswith("step-00000002") and saved.step == 2
    assert sorted(os.listdir(saved.path)) == ["host-0", "host-1"]
    third = client.step(job, 1)[0].loss
    assert client.load(job, str(tmp_path / "ckpt")) == 2
    assert client.step(job, 1)[0].loss == third  # both hosts went back to step 2
    with pytest.raises(ClientError) as refused:  # a bad path fails the call only
        client.load(job, str(tmp_path / "nowhere"))
    assert refused.value.code == grpc.StatusCode.NOT_FOUND
    logits = client.evaluate(job, PROBE)
    exported = client.export(job, "across")
    with driver.client() as inference:
        served = inference.infer("across", {"tokens": PROBE})
    np.testing.assert_allclose(next(iter(served.values())), logits, rtol=1e-4, atol=1e-4)
    assert exported.version == 1 and client.stats(job).state == "READY"
    client.delete(job)


def assert_bad_hosts_are_refused_at_once(client, other, driver, peer, archive):
    """Host lists and layouts a job cannot run on fail its creation before anything
    is built, and without waiting on the other host."""
    # A server listed twice, or a bad layout, is refused before anything is built.
    for hosts, layout, wanted in (
            ([driver.address, driver.address], "", "distinct"),
            ([driver.address], "", "every server"),
            ([driver.address, peer.address], "ring", "layout")):
        with pytest.raises(ClientError) as refused:
            client.create_job(**spec(archive, hosts=hosts, layout=layout))
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT, hosts
        assert wanted in refused.value.message
    # The driver listed second: the "other host" it calls is itself; a host
    # without the interpreters. Each says so at once, not after the 60 s the
    # hosts would wait for each other.
    started = time.monotonic()
    with pytest.raises(ClientError) as refused:
        client.create_job(**spec(archive, hosts=[peer.address, driver.address]))
    assert "driver itself" in refused.value.message
    with pytest.raises(ClientError) as refused:
        other.create_job(**spec(archive, dp_shard=2))  # the peer's own job
        client.create_job(**spec(archive, hosts=[driver.address, peer.address]))
    assert "host 1" in refused.value.message and "are free" in refused.value.message
    assert time.monotonic() - started < 10
    other.delete(other.list_jobs()[0].job_id)


def test_a_job_across_servers_is_driven_only_through_its_driver(veth, llama_archive, tmp_path):
    """Calls go through the driver; save, load, evaluate and export run on both hosts."""
    models = tmp_path / "models"
    models.mkdir()
    driver, peer = start_pair(models, veth, "loopback")
    try:
        with TrainingClient(driver.address) as client, TrainingClient(peer.address) as other:
            drive_one_job_across(client, other, driver, peer, llama_archive, tmp_path)
            assert_bad_hosts_are_refused_at_once(client, other, driver, peer, llama_archive)
            assert not client.list_jobs() and not other.list_jobs()
    finally:
        assert peer.stop() == 0 and driver.stop() == 0


@pytest.mark.parametrize("network,how", [("loopback", "kill"), ("namespaces", "kill"),
                                         ("namespaces", "cut")])
def test_a_lost_host_fails_the_job_within_its_timeout_and_a_new_job_resumes_it(
        repository, veth, llama_archive, tmp_path, network, how, record_property):
    checkpoints = str(tmp_path / "checkpoints")
    timeout_ms = 5000
    driver, peer = start_pair(repository[0], veth, network)
    record_property("network", network)
    job_spec = spec(llama_archive, dp_shard=2, hosts=[driver.address, peer.address],
                    checkpoint_dir=checkpoints, checkpoint_interval=3,
                    collective_timeout_ms=timeout_ms)
    try:
        with TrainingClient(driver.address) as client:
            # What the job would have done without the failure.
            unsaved = client.create_job(**{k: v for k, v in job_spec.items()
                                           if not k.startswith("checkpoint")})
            reference = [m.loss for m in client.step(unsaved, 12)]
            client.delete(unsaved)

            job = client.create_job(**job_spec)
            running = client.step_future(job, 500)
            while client.stats(job).step < 5:
                time.sleep(0.05)
            lost_at = time.monotonic()
            if how == "kill":
                peer.kill_serving(signal.SIGKILL)  # its supervisor starts it again
            else:
                veth.cut()
            with pytest.raises(Exception) as failed:
                running.result(timeout=120)
            noticed_s = time.monotonic() - lost_at
            record_property("failure_seen_after_s", round(noticed_s, 2))
            assert noticed_s < timeout_ms / 1000 + 10, noticed_s
            message = failed.value.details()
            assert peer.address in message or peer.host in message, message
            stats = client.stats(job)
            assert stats.state == "FAILED", stats
            step_dirs = sorted(n for n in os.listdir(checkpoints) if n.startswith("step-"))
            latest = open(os.path.join(checkpoints, "latest")).read().strip()
            assert latest in stats.reason and latest in step_dirs, (stats.reason, latest)
            committed = int(latest.split("-")[1])
            assert committed >= 3 and committed % 3 == 0
            for host in ("host-0", "host-1"):
                assert os.path.isfile(os.path.join(checkpoints, latest, host, "manifest.json"))
            # The driver serves inference throughout (its other interpreters are free).
            with driver.client() as inference:
                outputs = inference.infer("mlp", {"x": np.ones((2, 4), np.float32)})
                assert next(iter(outputs.values())).shape == (2, 3)
            if how == "cut":
                veth.mend()
            client.delete(job)
            # A new job on the same servers resumes from the last committed checkpoint,
            # bit-exactly (the peer restarted, or reachable again).
            job = create_once_restarted(client, job_spec)
            assert client.stats(job).step == committed
            resumed = [m.loss for m in client.step(job, 12 - committed)]
            assert resumed == reference[committed:], (committed, resumed, reference)
            client.delete(job)
    finally:
        if how == "cut":
            veth.mend()
        assert peer.stop() == 0 and driver.stop() == 0


def test_a_lost_driver_frees_the_other_hosts_part_which_serves_on(repository, veth,
                                                                  llama_archive, tmp_path,
                                                                  record_property):
    """The driver dies while the job is idle: the other host's part notices (it asks the
    driver about the job), fails and frees its interpreters, and that server serves on
    all of them; the restarted driver resumes the job with it."""
    checkpoints = str(tmp_path / "checkpoints")
    network = "namespaces" if veth.ready else "loopback"
    driver, peer = start_pair(repository[0], veth, network)
    record_property("network", network)
    job_spec = spec(llama_archive, dp_shard=2, hosts=[driver.address, peer.address],
                    checkpoint_dir=checkpoints, collective_timeout_ms=3000)
    try:
        with TrainingClient(driver.address) as client, TrainingClient(peer.address) as other:
            job = client.create_job(**job_spec)
            first = [m.loss for m in client.step(job, 4)]
            client.save(job, "")
            driver.kill_serving(signal.SIGKILL)  # its supervisor starts it again
            lost_at = time.monotonic()
            while other.list_jobs()[0].state != "FAILED":
                assert time.monotonic() - lost_at < 20, other.list_jobs()
                time.sleep(0.2)
            record_property("driver_loss_seen_after_s", round(time.monotonic() - lost_at, 2))
            (part,) = other.list_jobs()
            assert driver.address in part.reason and "lost" in part.reason, part
            with peer.client() as inference:
                for _ in range(4):
                    inference.infer("mlp", {"x": np.ones((2, 4), np.float32)})
            other.delete(job)  # a failed part may be deleted where it is
            resumed = create_once_restarted(client, job_spec)
            assert client.stats(resumed).step == 4
            later = [m.loss for m in client.step(resumed, 2)]
            client.delete(resumed)
            straight = client.create_job(**{k: v for k, v in job_spec.items()
                                            if k != "checkpoint_dir"})
            assert first + later == [m.loss for m in client.step(straight, 6)]
            client.delete(straight)
    finally:
        assert peer.stop() == 0 and driver.stop() == 0
