"""Small models the server tests package and serve (plain nn.Modules)."""

import asyncio
import time

import torch

from chorus import serving


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(4, 8)
        self.second = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


class Scale(torch.nn.Module):
    """y = x * factor: the second model, loaded and unloaded while others serve."""

    def __init__(self, factor=3.0):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class Raiser(torch.nn.Module):
    def forward(self, x):
        if float(x.sum()) > 0:
            raise ValueError(f"refusing a positive input (sum {float(x.sum()):.1f})")
        return x


class Hanger(torch.nn.Module):
    """Spins forever on a positive input (a model bug); echoes otherwise."""

    def forward(self, x):
        if float(x.sum()) > 0:
            while True:
                pass
        return x + 1


class Sleeper(torch.nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x * 2


class Identity(torch.nn.Module):
    def forward(self, x):
        return x


class Crasher(torch.nn.Module):
    """x * 2; x[0, 0] == 13 dereferences a null pointer (SIGSEGV), 7 calls os._exit(7),
    9 sends its process SIGKILL (as the kernel's OOM killer would: nothing can report it)."""

    def forward(self, x):
        if float(x[0, 0]) == 13.0:
            import ctypes
            ctypes.string_at(0)
        if float(x[0, 0]) == 7.0:
            import os
            os._exit(7)
        if float(x[0, 0]) == 9.0:
            import os
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        return x * 2


class WhoAmI(torch.nn.Module):
    """[x[:, 0] * 2, the serving process's pid] per row: which process (cell) answered."""

    def forward(self, x):
        import os
        pid = torch.full_like(x[:, 0], float(os.getpid()))
        return torch.stack([x[:, 0] * 2, pid], dim=1)


class Hog(torch.nn.Module):
    """x + the 16 MiB blocks it allocated and touched: x[0, 0] MiB of them, kept until
    it returns; x[0, 1] == 1 asks Python (bytearray) for it in one piece instead."""

    def forward(self, x):
        mib = int(x[0, 0])
        if float(x[0, 1]) == 1.0:
            return x + len(bytearray(mib << 20)) // (16 << 20)
        blocks = []
        for _ in range(mib // 16):
            blocks.append(torch.empty(16 << 20, dtype=torch.uint8).fill_(1))
        return x + len(blocks)


class Countdown(torch.nn.Module):
    """Decoupled: yields x + i for i in range(n), one response each."""

    def forward(self, x, n):
        for i in range(int(n.reshape(-1)[0])):
            yield x + i


class FailsMidway(torch.nn.Module):
    """Decoupled: two responses, then a Python error."""

    def forward(self, x):
        yield x
        yield x * 2
        raise ValueError("stopped after two responses")


class Endless(torch.nn.Module):
    """Decoupled: a response every 50 ms until the client goes away."""

    def forward(self, x):
        step = 0
        while True:
            time.sleep(0.05)
            step += 1
            yield x + step


class Shout(torch.nn.Module):
    """Text in, text out: each string upper-cased, and its length in characters."""

    def forward(self, text):
        upper = [s.upper() for s in text]
        return upper, torch.tensor([len(s) for s in text], dtype=torch.int64)


class Words(torch.nn.Module):
    """Decoupled: one response per word of the request's first string."""

    def forward(self, text):
        for word in text[0].split():
            yield [word]


class TinyClassifier(torch.nn.Module):
    """Images [N, 3, H, W] -> logits [N, 5]: what Triton's image_client expects of a model."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, image):
        return self.head(self.features(image).mean(dim=(2, 3)))


class Accumulator(torch.nn.Module):
    """A stateful model with implicit state (Triton's sequence batcher): each request's
    OUTPUT is its sequence's running sum; START (a control input) restarts it."""

    def forward(self, value, start, ready, state):
        total = state * (1 - start) + value * ready
        return total, total  # OUTPUT, and OUTPUT_STATE: the next request's INPUT_STATE


class PythonStateSum(torch.nn.Module):
    """A stateful model that keeps its sums in Python, by correlation id (CORRID), as
    Triton's Python-backend models do: right only if a sequence stays in one interpreter."""

    def __init__(self):
        super().__init__()
        self.sums = {}

    def forward(self, value, start, end, corrid):
        totals = []
        for row in range(value.shape[0]):
            key = int(corrid[row, 0])
            base = 0 if bool(start[row, 0]) else self.sums.get(key, 0)
            self.sums[key] = base + int(value[row, 0])
            totals.append(self.sums[key])
            if bool(end[row, 0]):
                del self.sums[key]
        return torch.tensor(totals, dtype=torch.int64).reshape(-1, 1)


class WarmupProbe(torch.nn.Module):
    """y = 2x; each call appends its input's shape and its interpreter's identity (the id
    of its `sys` module, one per interpreter) to the file at `log`."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, x):
        import sys

        with open(self.log, "a") as f:
            f.write(f"{list(x.shape)} {id(sys)} {float(x.sum())}\n")
        return x * 2


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class AsInt(torch.nn.Module):
    """float32 in, int64 out: a step whose output dtype another step cannot take."""

    def forward(self, x):
        return x.round().to(torch.int64)


class CallsTwo(torch.nn.Module):
    """Calls "scale", then "twolayer" on its output, in process (chorus.serving)."""

    def forward(self, x):
        scaled = serving.infer("scale", {"x": x})["output"]
        return serving.infer("twolayer", {"x": scaled}, outputs=["output"])["output"]


class CallsTwoAtOnce(torch.nn.Module):
    """Calls "scale" and "twolayer" on its input concurrently (infer_async)."""

    def forward(self, x):
        async def both():
            return await asyncio.gather(serving.infer_async("scale", {"x": x}),
                                        serving.infer_async("twolayer", {"x": x}))

        scaled, logits = asyncio.run(both())
        return scaled["output"], logits["output"]


class CallsNamed(torch.nn.Module):
    """Answers what model `target` answers for its input: a link of a call chain."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def forward(self, x):
        return serving.infer(self.target, {"x": x})["output"]


class Dawdler(torch.nn.Module):
    """Takes 3 s in Python (short sleeps, so a deadline can interrupt it between them)."""

    def forward(self, x):
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            time.sleep(0.01)
        return x * 2


class Impatient(torch.nn.Module):
    """Calls "sleeper" with a 0.2 s timeout; answers [seconds waited, 1.0 if the call ran
    past its deadline else 0.0] per row."""

    def forward(self, x):
        start = time.monotonic()
        try:
            serving.infer("sleeper", {"x": x}, timeout=0.2)
            late = 0.0
        except serving.ModelCallError as e:
            if e.code != "DEADLINE_EXCEEDED":
                raise
            late = 1.0
        return torch.tensor([[time.monotonic() - start, late]] * x.shape[0])


class CollectsStream(torch.nn.Module):
    """Stacks the responses decoupled model "countdown" streams for its input (n = 3)."""

    def forward(self, x):
        responses = serving.infer_stream("countdown", {"x": x, "n": torch.tensor([3])})
        return torch.stack([response["output"] for response in responses])


class AsksWrongly(torch.nn.Module):
    """Calls "scale" with an input it does not have; answers nothing."""

    def forward(self, x):
        return serving.infer("scale", {"y": x})["output"]


class NapsTwiceAtOnce(torch.nn.Module):
    """Calls "napper" (1.5 s each) twice with infer_async, gathered; answers the seconds
    both took."""

    def forward(self, x):
        async def both():
            return await asyncio.gather(serving.infer_async("napper", {"x": x}),
                                        serving.infer_async("napper", {"x": x}))

        start = time.monotonic()
        asyncio.run(both())
        return torch.full_like(x, time.monotonic() - start)
