#!/usr/bin/env python3
"""Triton's Python-backend examples, served by chorus unchanged (`make triton-examples`).

Triton's own examples (models and clients, copied unchanged) live outside the repository,
in `../shared/triton-python/examples/` beside the checkout (CI has them there too). This
script serves `examples/models/` exactly as it is with `build/bin/chorus-server` and runs
every client of `examples/clients/` unmodified against it, as a Triton user would:

    make triton-examples                      # or, by hand:
    PYTHON=$(make -s print-python)
    $PYTHON tests/triton_examples/run_examples.py [--build build] [--examples DIR]

What it does, in order:

1. Skips (prints why, exits 0, or `--skip-code` for CTest) when the examples are absent.
2. Checks that the ports the clients hard-code are free (HTTP 8000, gRPC 8001, metrics
   8002) and fails naming the port when one is taken: a server already there would answer
   the clients in chorus' place.
3. Starts `chorus-server --model-repository <examples>/models --interpreters 2` on those
   ports, in a process group of its own, and waits for `/v2/health/ready`. A model that
   fails to load keeps a strict server unready; once the repository index says no model is
   still loading, the clients run anyway (that model's client then fails, with the load
   error printed).
4. Runs each client with this Python (it needs tritonclient and whatever the client
   imports) from the client's folder, with a time limit; a client passes when it exits 0
   and prints its `PASS: ...` line.
5. Stops the server with SIGTERM (SIGKILL to its whole process group if it does not stop,
   and on any failure or interruption of this script), checks that the models folder is
   unchanged (the server must not write into it), prints a table (client, result,
   seconds) and writes build/triton_examples.json; the logs are in build/triton_examples/.

Exits 1 when any client fails, the server does not start or stop cleanly, or the models
folder changed.
"""

import argparse
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_EXAMPLES = ROOT.parent / "shared" / "triton-python" / "examples"
PORTS = {"HTTP": 8000, "gRPC": 8001, "metrics": 8002}
READY_URL = f"http://127.0.0.1:{PORTS['HTTP']}/v2/health/ready"
INDEX_URL = f"http://127.0.0.1:{PORTS['HTTP']}/v2/repository/index"

# (name, script under clients/, the line it prints when it passes).
CLIENTS: List[Tuple[str, str, str]] = [
    ("add_sub", "add_sub/client.py", "PASS: add_sub"),
    ("pytorch", "pytorch/client.py", "PASS: pytorch"),
    ("bls_sync", "bls/sync_client.py", "PASS: BLS Sync"),
    ("bls_async", "bls/async_client.py", "PASS: BLS Async"),
    ("bls_decoupled_sync", "bls_decoupled/sync_client.py", "PASS: BLS Decoupled Sync"),
    ("bls_decoupled_async", "bls_decoupled/async_client.py", "PASS: BLS Decoupled Async"),
    ("decoupled_repeat", "decoupled/repeat_client.py", "PASS: repeat_int32"),
    ("decoupled_square", "decoupled/square_client.py", "PASS: square_int32"),
    ("auto_complete", "auto_complete/client.py", "PASS: auto_complete"),
    ("custom_metrics", "custom_metrics/client.py", "PASS: custom_metrics"),
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, default=DEFAULT_EXAMPLES,
                        help="Triton's examples folder (models/ and clients/)")
    parser.add_argument("--build", type=Path, default=ROOT / "build",
                        help="the build tree (bin/chorus-server; results are written here)")
    parser.add_argument("--python", default=sys.executable, help="the Python the clients run on")
    parser.add_argument("--client-path", default="",
                        help="a folder with what the clients import beyond the Python's packages "
                        "(tools/install-example-client-deps.sh), put first on their PYTHONPATH")
    parser.add_argument("--client-timeout", type=float, default=60.0,
                        help="seconds each client may take")
    parser.add_argument("--ready-timeout", type=float, default=120.0,
                        help="seconds the server may take to load the models")
    parser.add_argument("--skip-code", type=int, default=0,
                        help="exit status when the examples are absent (CTest: its "
                        "SKIP_RETURN_CODE)")
    return parser.parse_args()


def port_taken(port: int) -> Optional[str]:
    """Why `port` cannot be the server's, or None when it is free."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
    try:
        probe.bind(("0.0.0.0", port))
    except OSError as e:
        return f"cannot bind it ({e.strerror})"
    finally:
        probe.close()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return "something accepts connections on it"
    except OSError:
        return None


def die_with_parent() -> None:
    """In a child process (the server, a client): SIGTERM when this script dies, however
    it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


class Server:
    """chorus-server in a process group of its own, stopped by stop() whatever happens."""

    def __init__(self, binary: Path, models: Path, log_path: Path):
        self.command = [str(binary), "--model-repository", str(models), "--interpreters", "2",
                        "--http-port", str(PORTS["HTTP"]), "--port", str(PORTS["gRPC"]),
                        "--metrics-port", str(PORTS["metrics"])]
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=die_with_parent)
        self.exit_status: Optional[int] = None

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then SIGKILL to the group after `timeout`; returns the exit status."""
        if self.exit_status is not None:
            return self.exit_status
        if self.running():
            self.process.send_signal(signal.SIGTERM)
        try:
            self.exit_status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"triton-examples: the server did not stop {timeout:.0f} s after SIGTERM: "
                  "killed", file=sys.stderr)
            self.exit_status = -signal.SIGKILL
        self.kill_group()
        self.process.wait()
        self.log.close()
        return self.exit_status

    def kill_group(self) -> None:
        """Whatever is left of the server's processes (a serving child, a stray helper)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, lines: int = 40) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def http_json(url: str, body: Optional[bytes] = None) -> Tuple[int, object]:
    """(status, parsed JSON body or None); status 0 when nothing answers."""
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return 0, None


def wait_until_ready(server: Server, timeout: float) -> Dict[str, str]:
    """Waits until the server is ready, or every model has settled (loaded or failed).

    Returns the models that failed to load, with their reasons. Raises RuntimeError
    when the server exits or does not settle within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if not server.running():
            raise RuntimeError(f"chorus-server exited with status {server.process.returncode} "
                               f"before it was ready:\n{server.log_tail()}")
        status, _ = http_json(READY_URL)
        if status == 200:
            return {}
        if status != 0:
            index_status, index = http_json(INDEX_URL, b"{}")
            if index_status == 200 and isinstance(index, list) and index and all(
                    entry.get("state") not in ("LOADING", "UNLOADING") for entry in index):
                return {entry["name"]: entry.get("reason", entry.get("state", "not loaded"))
                        for entry in index if entry.get("state") != "READY"}
        if time.monotonic() > deadline:
            raise RuntimeError(f"chorus-server was not ready after {timeout:.0f} s:\n"
                               f"{server.log_tail()}")
        time.sleep(0.2)


def last_error(output: str) -> str:
    """The line of a client's output that says why it failed: its last exception's."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
    return (errors or lines or ["no output"])[-1]


def run_client(python: str, clients_dir: Path, entry: Tuple[str, str, str], timeout: float,
               log_dir: Path, client_path: str = "") -> Dict[str, object]:
    """Runs one client unmodified from its folder; its result, seconds and why it failed."""
    name, script, pass_line = entry
    path = clients_dir / script
    env = dict(os.environ)
    if client_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (client_path, env.get("PYTHONPATH")) if p)
    started = time.monotonic()
    process = subprocess.Popen([python, path.name], cwd=path.parent, env=env,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                               errors="replace", start_new_session=True,
                               preexec_fn=die_with_parent)
    try:
        output, _ = process.communicate(timeout=timeout)
        exit_status: Optional[int] = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        exit_status = None
    finally:  # also when this script is stopped while the client runs
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    seconds = time.monotonic() - started
    (log_dir / f"{name}.log").write_text(output)
    passed_line = pass_line in output.splitlines()
    if exit_status is None:
        reason = f"timed out after {timeout:.0f} s"
    elif exit_status != 0:
        reason = f"exit status {exit_status}: {last_error(output)}"
    elif not passed_line:
        reason = f"exit status 0 but no {pass_line!r} line"
    else:
        reason = ""
    return {"client": name, "script": f"clients/{script}",
            "result": "FAIL" if reason else "PASS", "seconds": round(seconds, 2),
            "exit_status": exit_status, "reason": reason,
            "output_tail": "\n".join(output.splitlines()[-20:])}


def folder_state(folder: Path) -> Dict[str, Tuple[int, int]]:
    """Every path under `folder` with its size and modification time (ns)."""
    state = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        state[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns)
    return state


def folder_changes(before: Dict[str, Tuple[int, int]], after: Dict[str, Tuple[int, int]]
                   ) -> List[str]:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    return ([f"added {p}" for p in added] + [f"removed {p}" for p in removed]
            + [f"changed {p}" for p in changed])


def unlisted_clients(clients_dir: Path) -> List[str]:
    """Client scripts in the examples that CLIENTS does not run (each must be run)."""
    listed = {script for _, script, _ in CLIENTS}
    return sorted(str(p.relative_to(clients_dir)) for p in clients_dir.rglob("*.py")
                  if str(p.relative_to(clients_dir)) not in listed)


def print_table(results: List[Dict[str, object]]) -> None:
    width = max(len(str(r["client"])) for r in results)
    print(f"\n{'client':<{width}}  result  seconds")
    for r in results:
        print(f"{r['client']:<{width}}  {r['result']:<6}  {r['seconds']:>7.2f}")
    for r in results:
        if r["result"] != "PASS":
            print(f"\n{r['client']} failed: {r['reason']}\n{r['output_tail']}")


def check_preconditions(args: argparse.Namespace, binary: Path) -> Optional[str]:
    """Why the run cannot start, or None."""
    if not binary.is_file():
        return f"{binary} is not built (make build)"
    for what, port in PORTS.items():
        why = port_taken(port)
        if why:
            return (f"port {port} ({what}), which Triton's clients use, is taken: {why}; "
                    "stop what holds it and run again")
    return None


def serve_and_run(args: argparse.Namespace, binary: Path, log_dir: Path
                  ) -> Tuple[Dict[str, object], List[Dict[str, object]]]:
    """Starts the server, runs the clients, stops the server (on every path)."""
    models, clients_dir = args.examples / "models", args.examples / "clients"
    before = folder_state(models)
    started = time.monotonic()
    server = Server(binary, models, log_dir / "server.log")
    summary: Dict[str, object] = {"command": server.command, "log": str(server.log_path)}
    results: List[Dict[str, object]] = []
    try:
        unavailable = wait_until_ready(server, args.ready_timeout)
        summary["ready_seconds"] = round(time.monotonic() - started, 2)
        summary["models_not_loaded"] = unavailable
        for name, reason in unavailable.items():
            print(f"triton-examples: model {name} did not load: {reason}", flush=True)
        for entry in CLIENTS:
            results.append(run_client(args.python, clients_dir, entry, args.client_timeout,
                                      log_dir, args.client_path))
            print(f"{results[-1]['client']}: {results[-1]['result']} "
                  f"({results[-1]['seconds']} s)", flush=True)
    except RuntimeError as e:
        summary["error"] = str(e)
        print(f"triton-examples: {e}", file=sys.stderr)
    finally:
        summary["exit_status"] = server.stop()
    summary["models_folder_changes"] = folder_changes(before, folder_state(models))
    return summary, results


def main() -> int:
    args = parse_args()
    args.examples = args.examples.resolve()
    if not (args.examples / "models").is_dir() or not (args.examples / "clients").is_dir():
        print(f"triton-examples: skipped: Triton's examples are not at {args.examples} "
              "(they are test data kept beside the checkout, in ../shared/triton-python/"
              "examples, never in the repository)")
        return args.skip_code
    binary = args.build.resolve() / "bin" / "chorus-server"
    why_not = check_preconditions(args, binary)
    if why_not:
        print(f"triton-examples: {why_not}", file=sys.stderr)
        return 1
    log_dir = args.build.resolve() / "triton_examples"
    log_dir.mkdir(parents=True, exist_ok=True)
    # SIGTERM (a CTest timeout, a CI job cancelled) unwinds through serve_and_run's
    # finally, which stops the server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    summary, results = serve_and_run(args, binary, log_dir)
    unlisted = unlisted_clients(args.examples / "clients")
    if results:
        print_table(results)
    failures = [str(r["client"]) for r in results if r["result"] != "PASS"]
    problems = []
    if failures:
        problems.append(f"clients failed: {', '.join(failures)}")
    if unlisted:
        problems.append(f"client scripts not run (add them to CLIENTS): {', '.join(unlisted)}")
    if "error" in summary:
        problems.append("the server did not get ready")
    elif summary["exit_status"] != 0:
        problems.append(f"the server exited with status {summary['exit_status']} on SIGTERM")
    if summary["models_folder_changes"]:
        problems.append("the server wrote into the models folder: "
                        + "; ".join(summary["models_folder_changes"]))  # type: ignore[arg-type]
    report = {"examples": str(args.examples), "server": summary, "clients": results,
              "passed": sum(r["result"] == "PASS" for r in results), "failed": len(failures),
              "problems": problems}
    out = args.build.resolve() / "triton_examples.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{report['passed']} of {len(CLIENTS)} clients passed; {out}", flush=True)
    for problem in problems:
        print(f"triton-examples: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
