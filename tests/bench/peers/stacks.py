"""The servers' process groups, and the memory a stack of processes takes."""

import os
import signal
import socket
import subprocess
import time


class Stack:
    """A server's process group; stopped by stop() or by the driver's cleanup."""
    running = []

    def __init__(self, command, env, cwd, log_path, read_stdout=False):
        self.log_file = open(log_path, "w")
        self.process = subprocess.Popen(
            command, env=env, cwd=cwd, stderr=self.log_file, text=True,
            stdout=subprocess.PIPE if read_stdout else self.log_file, start_new_session=True)
        self.pgid = self.process.pid
        Stack.running.append(self)

    def alive(self):
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False

    def stop(self, grace_s=30.0):
        if self not in Stack.running:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.process.poll()  # reaps the group leader
                if not self.alive():
                    break
                time.sleep(0.1)
            if not self.alive():
                break
        self.process.poll()
        if self.process.stdout:
            self.process.stdout.close()
        self.log_file.close()
        Stack.running.remove(self)

    @classmethod
    def stop_all(cls):
        for stack in list(cls.running):
            stack.stop(grace_s=10.0)


def process_tree(root):
    """[root and every descendant], by scanning /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def thread_cpu(root):
    """{tid: (process name, thread name, CPU seconds)} for every thread of `root` and its
    descendants (user + system time from /proc/PID/task/TID/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads = {}
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/comm") as f:
                process = f.read().strip()
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # from field 3, the state
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            threads[int(tid)] = (process, name, (int(fields[11]) + int(fields[12])) / ticks)
    return threads


def machine_busy_s():
    """The CPU seconds the machine's cores have been busy since boot (user, system, irq
    and softirq; not idle, waiting on I/O, or stolen by the hypervisor), from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _, _, irq, softirq = (int(v) for v in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def process_memory(pid):
    """(PSS, RSS) MiB of one process from /proc/PID/smaps_rollup, and its name."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:"):
                fields[parts[0]] = int(parts[1]) / 1024.0
    with open(f"/proc/{pid}/comm") as f:
        name = f.read().strip()
    return fields["Pss:"], fields["Rss:"], name


def resident_frames(pid):
    """The physical page frames (PFNs) `pid` has resident, from /proc/PID/pagemap
    (root only: others read zeros, and then None is returned)."""
    import numpy as np
    frames = []
    with open(f"/proc/{pid}/smaps") as smaps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        span = None
        for line in smaps:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(v, 16) for v in head.split("-"))
                span = (start, end)
            elif head == "Rss:" and span and int(line.split()[1]) > 0:
                start, end = span
                try:
                    pagemap.seek(start // 4096 * 8)
                    entries = np.frombuffer(pagemap.read((end - start) // 4096 * 8),
                                            dtype=np.uint64)
                except OSError:
                    continue
                present = entries[(entries >> np.uint64(63)).astype(bool)]
                frames.append(present & np.uint64((1 << 55) - 1))
    if not frames:
        return np.zeros(0, dtype=np.uint64)
    frames = np.concatenate(frames)
    if frames.size and not frames.any():
        return None
    return frames


def stack_memory(root, roles, exclude=()):
    """Summed PSS and RSS over `root`'s process tree, with each process."""
    processes = []
    for pid in process_tree(root):
        if pid in exclude:
            continue
        try:
            pss, rss, name = process_memory(pid)
        except (OSError, KeyError):
            continue
        processes.append({"pid": pid, "name": name, "role": roles(pid, name),
                          "pss_mib": round(pss, 1), "rss_mib": round(rss, 1)})
    memory = {"pss_mib": round(sum(p["pss_mib"] for p in processes), 1),
              "rss_mib": round(sum(p["rss_mib"] for p in processes), 1)}
    # The stack's distinct physical pages, each counted once however many of its
    # processes map it and whoever else does: what it would take on a machine of
    # its own. PSS splits a page among all its mappers, so another program that
    # maps the same libtorch files (a test, a second server) lowers it.
    try:
        import numpy as np
        frames = [resident_frames(p["pid"]) for p in processes]
        if all(f is not None for f in frames):
            memory["unique_mib"] = round(np.unique(np.concatenate(frames)).size * 4096 / 2**20,
                                         1)
    except OSError:
        pass
    memory["processes"] = processes
    return memory


def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def intra_op_threads(workers):
    """What chorus-server gives libtorch's one pool (InterpreterManagerOptions'
    default): the cores over the interpreters, at least 1."""
    return max(1, (os.cpu_count() or 1) // workers)
