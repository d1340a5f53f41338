"""Who trains, who serves (docs/training.md): a training job and a generative model's
generation engines never share an interpreter, whichever comes first, and the server
says who holds what when it refuses."""

import openai
import pytest

from chorus.client import ClientError
from chorus.client.training import TrainingClient
from conftest import ServerProcess
from llm_models import debug_generator, package_llm
from training_specs import package_tiny_llama, spec


@pytest.fixture(scope="module")
def llama_archive(tmp_path_factory):
    return package_tiny_llama(tmp_path_factory.mktemp("llama") / "llama3.pt")


def generate(server, prompt):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused")
    answer = client.completions.create(model="llama3", prompt=prompt, max_tokens=4, temperature=0)
    return answer.choices[0].text


def test_jobs_and_generation_engines_never_share_an_interpreter(tmp_path, llama_archive):
    repo = tmp_path / "repository"
    package_llm(repo, debug_generator(), {"engines": 1})
    server = ServerProcess(repo, interpreters=3)
    try:
        # The engine is pinned to the highest interpreter, jobs take the lowest.
        assert "generation engines on interpreters 2" in server.log_text()
        with TrainingClient(server.address) as training, server.client() as models:
            job = training.create_job(**spec(llama_archive, dp_shard=2))
            assert list(training.stats(job).interpreters) == [0, 1]
            assert generate(server, "chorus") != ""  # the engine serves beside the job
            training.step(job, 1)
            with pytest.raises(ClientError) as refused:
                training.create_job(**spec(llama_archive))
            assert "1 ranks need as many interpreters; the server has 3 and 0 are free" in \
                refused.value.message
            assert "2: model llama3 version 1" in refused.value.message
            training.delete(job)
            with pytest.raises(ClientError) as refused:
                training.create_job(**spec(llama_archive, dp_shard=3, global_batch=6))
            assert "2: model llama3 version 1" in refused.value.message
            # With the model unloaded its interpreter trains; a generative model cannot
            # load while jobs hold every interpreter, and can once they are given back.
            models.unload("llama3")
            job = training.create_job(**spec(llama_archive, dp_shard=3, global_batch=6))
            assert list(training.stats(job).interpreters) == [0, 1, 2]
            with pytest.raises(ClientError) as refused:
                models.load("llama3")
            assert "every interpreter runs a training job" in refused.value.message
            training.delete(job)
            models.load("llama3")
            assert generate(server, "chorus") != ""
    finally:
        assert server.stop() == 0
