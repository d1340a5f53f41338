"""bench-check against doctored results: the guard must fail exactly on regressions."""

import copy
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.path.join(HERE, "baseline.json")


def result_matching(baseline):
    """A suite result whose ratios equal the baseline's."""
    result = {model: dict(ratios) for model, ratios in baseline["ratios"].items()}
    result["suite"] = {"short": False}
    return result


def run_check(tmp_path, result, *extra):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    done = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path), BASELINE,
                           *extra], capture_output=True, text=True)
    return done.returncode, done.stdout


@pytest.fixture(scope="module")
def baseline():
    with open(BASELINE) as f:
        return json.load(f)


def test_the_committed_baseline_covers_every_model_and_ratio(baseline):
    assert baseline["threshold"] == 0.07
    assert set(baseline["ratios"]) == {"resnet18", "mobilenet_v3", "mlp", "llama3_debug",
                                       "control_flow"}
    for model, ratios in baseline["ratios"].items():
        assert {"chorus_vs_threads", "chorus_vs_processes_memory"} <= set(ratios), model
    assert "python_vs_torchscript" in baseline["ratios"]["resnet18"]


def test_the_baseline_itself_passes(tmp_path, baseline):
    code, out = run_check(tmp_path, result_matching(baseline))
    assert code == 0, out
    assert "all ratios hold" in out


def test_a_ratio_eight_percent_down_fails_and_is_named(tmp_path, baseline):
    doctored = result_matching(baseline)
    doctored["resnet18"]["chorus_vs_threads"] *= 0.92
    code, out = run_check(tmp_path, doctored)
    assert code == 1
    failures = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(failures) == 1 and "resnet18.chorus_vs_threads" in failures[0], out
    assert "8.0% below" in failures[0]


def test_report_prints_a_regression_without_failing(tmp_path, baseline):
    result = result_matching(baseline)
    result["mlp"]["chorus_vs_threads"] *= 0.92
    status, out = run_check(tmp_path, result, "--report")
    assert status == 0
    assert "FAIL mlp.chorus_vs_threads" in out
    assert "some ratios are below their baseline" in out


def test_a_drop_within_the_threshold_and_any_gain_pass(tmp_path, baseline):
    doctored = result_matching(baseline)
    doctored["control_flow"]["chorus_vs_processes_memory"] *= 0.94
    doctored["mlp"]["chorus_vs_threads"] *= 1.5
    code, out = run_check(tmp_path, doctored)
    assert code == 0, out


def test_a_missing_ratio_fails(tmp_path, baseline):
    doctored = result_matching(baseline)
    del doctored["llama3_debug"]["chorus_vs_threads"]
    code, out = run_check(tmp_path, doctored)
    assert code == 1
    assert "llama3_debug.chorus_vs_threads: missing" in out


def test_a_stricter_threshold_from_the_command_line(tmp_path, baseline):
    doctored = result_matching(baseline)
    doctored["mlp"]["chorus_vs_processes_memory"] *= 0.97
    assert run_check(tmp_path, doctored)[0] == 0
    assert run_check(tmp_path, doctored, "--threshold", "0.02")[0] == 1


def test_update_writes_a_baseline_the_result_then_passes(tmp_path, baseline):
    result = copy.deepcopy(result_matching(baseline))
    result["mlp"]["chorus_vs_threads"] = 9.0
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    new_baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path), str(new_baseline),
                    "--update"], check=True, capture_output=True)
    assert json.loads(new_baseline.read_text())["ratios"]["mlp"]["chorus_vs_threads"] == 9.0
    done = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path),
                           str(new_baseline)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_update_from_several_results_keeps_each_ratios_floor(tmp_path, baseline):
    low, high = result_matching(baseline), result_matching(baseline)
    low["mlp"]["chorus_vs_threads"], high["mlp"]["chorus_vs_threads"] = 1.9, 2.4
    low["control_flow"]["chorus_vs_threads"], high["control_flow"]["chorus_vs_threads"] = 3.1, 2.6
    paths = []
    for i, result in enumerate([low, high]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(result))
    new_baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, os.path.join(HERE, "check.py"), *map(str, paths),
                    str(new_baseline), "--update"], check=True, capture_output=True)
    written = json.loads(new_baseline.read_text())["ratios"]
    assert written["mlp"]["chorus_vs_threads"] == 1.9
    assert written["control_flow"]["chorus_vs_threads"] == 2.6


def test_checking_several_results_at_once_is_refused(tmp_path, baseline):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result_matching(baseline)))
    done = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path), str(path),
                           BASELINE], capture_output=True, text=True)
    assert done.returncode == 2
    assert "several results only with --update" in done.stderr


def test_update_can_keep_only_some_models(tmp_path, baseline):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result_matching(baseline)))
    new_baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path), str(new_baseline),
                    "--update", "--models", "mlp,control_flow"], check=True, capture_output=True)
    assert set(json.loads(new_baseline.read_text())["ratios"]) == {"mlp", "control_flow"}


def test_update_keeps_only_ratios_every_result_measured(tmp_path, baseline):
    full, short = result_matching(baseline), result_matching(baseline)
    del short["mlp"]["python_vs_torchscript"]
    paths = [tmp_path / "full.json", tmp_path / "short.json"]
    paths[0].write_text(json.dumps(full))
    paths[1].write_text(json.dumps(short))
    new_baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, os.path.join(HERE, "check.py"), *map(str, paths),
                    str(new_baseline), "--update"], check=True, capture_output=True)
    ratios = json.loads(new_baseline.read_text())["ratios"]
    assert "python_vs_torchscript" not in ratios["mlp"]
    assert "chorus_vs_threads" in ratios["mlp"]


def test_update_leaves_the_free_threaded_ratios_out(tmp_path, baseline):
    # They need a free-threaded Python CI lacks: a baseline holding them would fail
    # every run without it.
    result = result_matching(baseline)
    result["control_flow"].update(chorus_vs_free_threaded=1.1,
                                  chorus_vs_free_threaded_footprint=1.4)
    result["free_threaded"] = {"ft_python": "/x/python3.14t", "python": "3.14.7"}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    new_baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path), str(new_baseline),
                    "--update"], check=True, capture_output=True)
    ratios = json.loads(new_baseline.read_text())["ratios"]
    assert "free_threaded" not in ratios
    assert not any("free_threaded" in name for name in ratios["control_flow"])
    assert "chorus_vs_threads" in ratios["control_flow"]


def test_a_free_threaded_ratio_is_skipped_when_the_mode_did_not_run(tmp_path, baseline):
    doctored = copy.deepcopy(baseline)
    doctored["ratios"]["control_flow"]["chorus_vs_free_threaded"] = 1.0
    baseline_path = tmp_path / "baseline.json"
    baseline_path.write_text(json.dumps(doctored))
    result = result_matching(baseline)
    result["free_threaded"] = {"skipped": "no free-threaded Python given"}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))

    def check():
        return subprocess.run([sys.executable, os.path.join(HERE, "check.py"), str(path),
                               str(baseline_path)], capture_output=True, text=True)

    done = check()
    assert done.returncode == 0, done.stdout
    assert "skip control_flow.chorus_vs_free_threaded" in done.stdout
    # Where the mode ran, a missing ratio is a failure like any other.
    result["free_threaded"] = {"ft_python": "/x/python3.14t"}
    path.write_text(json.dumps(result))
    done = check()
    assert done.returncode == 1
    assert "control_flow.chorus_vs_free_threaded: missing" in done.stdout
