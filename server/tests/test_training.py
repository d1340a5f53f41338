"""Training jobs through the real server over gRPC: the Llama 3 example on its corpus."""

import json
import os
import signal
import threading
import time

import grpc
import numpy as np
import pytest

from chorus.client import ClientError
from chorus.client.training import TrainingClient
from conftest import ServerProcess, rpc_code
from training_specs import TINY, package_tiny_llama, spec


@pytest.fixture(scope="module")
def llama_archive(tmp_path_factory):
    return package_tiny_llama(tmp_path_factory.mktemp("llama") / "llama3.pt")


@pytest.fixture(scope="module")
def crashing_llama_archive(tmp_path_factory):
    """The Llama archive whose model kills the server in its second checkpoint save."""
    import save_crash
    return package_tiny_llama(tmp_path_factory.mktemp("llama") / "llama3-save-crash.pt",
                              build=lambda config, **kwargs: save_crash.build(name=config,
                                                                              **kwargs))


@pytest.fixture(scope="module")
def server(repository):
    process = ServerProcess(repository[0], interpreters=2)
    yield process
    assert process.stop() == 0


def run(client, archive, steps, **overrides):
    job = client.create_job(**spec(archive, **overrides))
    try:
        return [m.loss for m in client.step(job, steps)], job
    except Exception:
        client.delete(job)
        raise


def gauge_values(text, job):
    """{metric name: value} of the Prometheus lines labelled with `job`."""
    label = '{job="%s"} ' % job
    return {line.split("{")[0]: float(line.split(label)[1])
            for line in text.splitlines() if label in line}


def test_loss_falls_and_fsdp_on_two_ranks_matches_one(server, llama_archive, tmp_path):
    log = str(tmp_path / "metrics.jsonl")
    with TrainingClient(server.address) as client:
        single, job = run(client, llama_archive, 20, metrics_log=log)
        stats = client.stats(job)
        assert stats.step == 20 and list(stats.interpreters) == [0]
        assert stats.last.tokens_per_second > 0 and stats.last.mfu_pct > 0
        gauges = gauge_values(server.metrics(), job)
        assert gauges["chorus_training_step"] == 20
        assert gauges["chorus_training_loss"] == pytest.approx(stats.last.loss, rel=1e-5)
        assert gauges["chorus_training_tokens_per_second_per_rank"] > 0
        client.delete(job)
        assert not gauge_values(server.metrics(), job)  # the job's gauges go with it
        fsdp, job = run(client, llama_archive, 20, dp_shard=2)
        client.delete(job)
    assert single[-1] < 0.8 * single[0], single
    for step, (a, b) in enumerate(zip(single, fsdp)):
        assert abs(a - b) / abs(a) <= 1e-5, (step, a, b)
    lines = [json.loads(line) for line in open(log)]
    assert [line["step"] for line in lines] == list(range(1, 21))
    assert all(line["tokens_per_s"] > 0 for line in lines)


def test_twenty_steps_equal_ten_save_load_ten(server, llama_archive, tmp_path):
    probe = np.arange(2 * 16, dtype=np.int64).reshape(2, 16) % 256
    with TrainingClient(server.address) as client:
        straight, job = run(client, llama_archive, 20)
        straight_logits = client.evaluate(job, probe)
        client.delete(job)

        first, job = run(client, llama_archive, 10)
        saved = client.save(job, str(tmp_path / "ckpt"))
        assert saved.step == 10 and saved.path.endswith("step-00000010")
        client.delete(job)

        job = client.create_job(**spec(llama_archive))
        assert client.load(job, str(tmp_path / "ckpt")) == 10
        second = [m.loss for m in client.step(job, 10)]
        resumed_logits = client.evaluate(job, probe)
        client.delete(job)
    assert first + second == straight  # bit-exact
    np.testing.assert_array_equal(resumed_logits, straight_logits)


def test_a_crash_in_the_middle_of_a_save_leaves_the_previous_checkpoint(repository,
                                                                        crashing_llama_archive,
                                                                        tmp_path):
    archive = crashing_llama_archive
    factory = dict(model_factory="save_crash:build")
    checkpoints = str(tmp_path / "ckpt")
    crashing = ServerProcess(repository[0], "--no-supervisor", interpreters=1)
    with TrainingClient(crashing.address) as client:
        before, job = run(client, archive, 2, **factory)
        assert client.save(job, checkpoints).step == 2
        client.step(job, 2)
        with pytest.raises(ClientError):
            client.save(job, checkpoints)  # the server dies writing it
    assert crashing.process.wait(30) == -signal.SIGKILL
    assert open(os.path.join(checkpoints, "latest")).read().strip() == "step-00000002"
    server = ServerProcess(repository[0], interpreters=1)
    try:
        with TrainingClient(server.address) as client:
            job = client.create_job(**spec(archive, **factory))
            assert client.load(job, checkpoints) == 2
            after = [m.loss for m in client.step(job, 2)]
            client.delete(job)
            reference, job = run(client, archive, 4, **factory)
            client.delete(job)
        assert before + after == reference
    finally:
        assert server.stop() == 0


def retried(call, deadline_s=120):
    """call()'s result, retried while the server restarts or resumes jobs (UNAVAILABLE)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except ClientError as e:
            if e.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_job_with_a_checkpoint_dir_resumes_by_itself_after_the_server_crashes(repository,
                                                                              llama_archive,
                                                                              tmp_path):
    checkpoints = str(tmp_path / "ckpt")
    server = ServerProcess(repository[0], interpreters=1)  # supervised
    try:
        with TrainingClient(server.address) as client:
            reference, job = run(client, llama_archive, 10)
            client.delete(job)
            job = client.create_job(**spec(llama_archive, checkpoint_dir=checkpoints,
                                           checkpoint_interval=2))
            before = [m.loss for m in client.step(job, 5)]
            assert before == reference[:5]
            assert open(os.path.join(checkpoints, "latest")).read() == "step-00000004\n"
            server.kill_serving(signal.SIGSEGV)
            # The restarted server recreates the job under its id, from step 4.
            stats = retried(lambda: client.stats(job))
            assert stats.step == 4 and stats.checkpoint_dir == checkpoints
            after = [m.loss for m in client.step(job, 6)]
            assert after == reference[4:]  # bit-exact with the uninterrupted run
            assert client.save(job, "").path == os.path.join(checkpoints, "step-00000010")
            # A new job on the same directory starts where the last left off.
            client.delete(job)
            again = client.create_job(**spec(llama_archive, checkpoint_dir=checkpoints))
            assert client.stats(again).step == 10 and again != job
            client.delete(again)
            # A deleted job is not recreated by the next restart.
            server.kill_serving(signal.SIGSEGV)
            with pytest.raises(ClientError) as gone:
                retried(lambda: client.stats(again))
            assert gone.value.code == grpc.StatusCode.NOT_FOUND
        log = server.log_text()
        assert f"training job {job} resumed from {checkpoints} at step 4" in log, log
    finally:
        assert server.stop() == 0


def test_a_job_that_crashes_the_server_twice_is_not_resumed_again(repository,
                                                                 crashing_llama_archive,
                                                                 tmp_path):
    checkpoints = str(tmp_path / "ckpt")
    # Every serving process is killed (SIGKILL) in its second checkpoint save.
    crashing = spec(crashing_llama_archive, model_factory="save_crash:build",
                    checkpoint_dir=checkpoints, checkpoint_interval=1)
    server = ServerProcess(repository[0], interpreters=1)
    try:
        with TrainingClient(server.address) as client:
            job = client.create_job(**crashing)
            for resumed_at in (0, 1):
                assert retried(lambda: client.stats(job)).step == resumed_at
                with pytest.raises(ClientError):
                    client.step(job, 5)  # the save of step resumed_at + 2 ends the process
            with pytest.raises(ClientError) as refused:
                retried(lambda: client.stats(job))
            assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert "is quarantined" in refused.value.message
            assert checkpoints in refused.value.message
            assert open(os.path.join(checkpoints, "latest")).read() == "step-00000002\n"
            client.delete(job)  # forgets it
            assert rpc_code(lambda: client.stats(job)) == grpc.StatusCode.NOT_FOUND
        log = server.log_text()
        assert f"supervisor: training job {job} is quarantined" in log, log
        assert "signal SIGKILL" in log, log
        assert f"supervisor: the serving process was running: training job {job} rank 0" in log
    finally:
        assert server.stop() == 0


def test_steps_stop_at_the_callers_deadline_or_cancellation_and_the_job_goes_on(server,
                                                                               llama_archive):
    many = 1_000_000
    with TrainingClient(server.address) as client:
        job = client.create_job(**spec(llama_archive))
        try:
            with pytest.raises(ClientError) as error:
                client.step(job, many, timeout=1.0)
            assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            # The job stopped at a step boundary: the next call runs at once
            # instead of queueing behind a million steps.
            assert len(client.step(job, 1, timeout=60)) == 1
            after_deadline = client.stats(job).step
            assert 1 < after_deadline < 10_000
            future = client.step_future(job, many)
            deadline = time.monotonic() + 60
            while client.stats(job).step < after_deadline + 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert future.cancel()
            assert len(client.step(job, 1, timeout=60)) == 1
            after_cancel = client.stats(job).step
            assert after_deadline + 3 < after_cancel < after_deadline + 10_000
            losses = [m.loss for m in client.step(job, 2)]
            assert all(np.isfinite(losses))
        finally:
            client.delete(job)


def test_bad_job_specs_are_invalid_argument_and_the_server_keeps_serving(server, llama_archive):
    x = {"x": np.ones((1, 4), np.float32)}
    cases = [
        (dict(archive="/no/such/archive.pt"), "spec.archive"),
        (dict(dp_shard=2, tp=2), "4 ranks need as many interpreters"),
        (dict(tp=2, model_config_json=json.dumps({**TINY, "n_heads": 6, "n_kv_heads": 3,
                                                  "dim": 120})), "must divide n_heads"),
        (dict(model_factory="model:no_such_factory"), "no_such_factory"),
        (dict(global_batch=7, dp_shard=2), "does not divide"),
        (dict(devices=["cpu", "cpu"]), "lists 2 devices for 1 ranks"),
        (dict(devices=["cuda:7"]), "cuda:7 is not available"),
    ]
    with TrainingClient(server.address) as client, server.client() as inference:
        for overrides, message in cases:
            with pytest.raises(ClientError) as error:
                client.create_job(**{**spec(llama_archive), **overrides})
            assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT, overrides
            assert message in error.value.message, (message, error.value.message)
            assert inference.infer("mlp", x)["output"].shape == (1, 3)
        job = client.create_job(**spec(llama_archive))
        try:
            with pytest.raises(ClientError) as error:
                client.step(job, batch=np.zeros((8, 5), np.int64))
            assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert "[global_batch, seq_len + 1]" in error.value.message
            assert client.step(job, batch=np.zeros((8, 33), np.int64))[0].step == 1
        finally:
            client.delete(job)
        assert rpc_code(lambda: client.step("job-404", 1)) == grpc.StatusCode.NOT_FOUND


def test_exported_checkpoint_serves_the_training_jobs_logits(server, llama_archive):
    import data
    tokens = data.encode("the keeper wrote it down")[None, :].numpy()
    with TrainingClient(server.address) as client, server.client() as inference:
        _, job = run(client, llama_archive, 5)
        received, done = [], threading.Event()

        def listen():
            for metrics in client.stream_metrics(job, from_step=1):
                received.append(metrics.step)
            done.set()

        listener = threading.Thread(target=listen)
        listener.start()
        client.step(job, 2)
        expected = client.evaluate(job, tokens)
        exported = client.export(job, "tiny_llama")
        served = inference.infer("tiny_llama", {"tokens": tokens})["logits"]
        client.delete(job)  # ends the metrics stream
        assert done.wait(30)
        listener.join()
    assert exported.version == 1 and exported.path.endswith("tiny_llama/1/model.pt")
    assert served.shape == expected.shape == (1, tokens.shape[1], 256)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    assert received == [1, 2, 3, 4, 5, 6, 7]


def test_bf16_mixed_precision_on_one_and_two_ranks(server, llama_archive):
    with TrainingClient(server.address) as client:
        reference, job = run(client, llama_archive, 6)
        client.delete(job)
        for dp in (1, 2):
            losses, job = run(client, llama_archive, 6, param_dtype="bfloat16", dp_shard=dp)
            client.delete(job)
            assert losses != reference, dp  # the compute really was bf16
            for a, b in zip(losses, reference):
                assert abs(a - b) / b < 0.03, (dp, losses, reference)
            assert losses[-1] < 0.8 * losses[0], (dp, losses)


def busy_seconds(text):
    prefix = 'chorus_interpreter_busy_seconds_total{interpreter="'
    return {int(line[len(prefix):].split('"')[0]): float(line.split()[-1])
            for line in text.splitlines() if line.startswith(prefix)}


def test_inference_moves_off_the_interpreters_a_job_holds(server, llama_archive):
    x = {"x": np.ones((4, 4), np.float32)}
    with TrainingClient(server.address) as client, server.client() as inference:
        _, job = run(client, llama_archive, 1)
        training = list(client.stats(job).interpreters)
        assert len(training) == 1
        serving = 1 - training[0]
        before = busy_seconds(server.metrics())
        for _ in range(300):
            assert inference.infer("mlp", x)["output"].shape == (4, 3)
        during = busy_seconds(server.metrics())
        client.delete(job)
        for _ in range(300):
            inference.infer("mlp", x)
        after = busy_seconds(server.metrics())
    assert during[training[0]] == before[training[0]]  # not one request ran there
    assert during[serving] > before[serving]
    assert after[training[0]] > during[training[0]]  # serving again once the job is gone


def test_scrapes_and_stats_while_jobs_come_and_go_leave_the_server_serving(server, llama_archive):
    """Prometheus scrapes /metrics every few seconds and a job takes seconds to create: a
    scrape (or GetStats, or a metrics stream) while a job was being created or deleted used
    to dereference a job that did not exist (SIGSEGV). ListJobs lists only jobs that exist."""
    stop = threading.Event()
    unexpected, polls = [], {"scrapes": 0, "stats_ok": 0, "not_found": 0}
    with TrainingClient(server.address) as client:  # the id of a job made before this test
        created = [client.create_job(**spec(llama_archive))]
        client.delete(created[0])

    def poll():
        with TrainingClient(server.address) as client:
            while not stop.is_set():
                try:
                    server.metrics()
                    polls["scrapes"] += 1
                    for listed in client.list_jobs():
                        if listed.name != "tiny-llama" or not listed.interpreters:
                            unexpected.append(listed)
                    # The jobs made so far, and the next few ids (one is being created).
                    last = int(created[-1].split("-")[1]) if created else 0
                    for job_id in created[-1:] + [f"job-{last + n}" for n in range(1, 4)]:
                        try:
                            client.stats(job_id)
                            polls["stats_ok"] += 1
                        except ClientError as e:
                            if e.code != grpc.StatusCode.NOT_FOUND:
                                unexpected.append(e)
                            polls["not_found"] += 1
                except Exception as e:  # the server went away, or answered nonsense
                    unexpected.append(e)
                    return

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    for thread in pollers:
        thread.start()
    try:
        with TrainingClient(server.address) as client:
            for _ in range(3):
                job = client.create_job(**spec(llama_archive))
                created.append(job)
                assert job in [listed.job_id for listed in client.list_jobs()]
                assert len(client.step(job, 1)) == 1
                client.delete(job)
                assert job not in [listed.job_id for listed in client.list_jobs()]
                with pytest.raises(ClientError) as gone:
                    client.stats(job)
                assert gone.value.code == grpc.StatusCode.NOT_FOUND
    finally:
        stop.set()
        for thread in pollers:
            thread.join()
    assert server.process.poll() is None, server.log_text()[-3000:]
    assert not unexpected, unexpected
    assert polls["scrapes"] >= 6 and polls["stats_ok"] > 0, polls
