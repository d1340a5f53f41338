"""Fault injection for the training tests, shipped inside a test archive (never
part of chorus): build() is the Llama 3 example's model:build plus a probe
whose checkpoint state, when the job's CRASH_ON_SAVE-th save pickles it, kills
the serving process in the middle of writing the shard with SIGKILL, as the
kernel's OOM killer would (nothing in the process can report it).
"""

import os
import signal

import torch

import model

CRASH_ON_SAVE = 2
_saves = 0


class _KillWhenPickled:
    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGKILL)


class SaveCrashProbe(torch.nn.Module):
    def get_extra_state(self):
        global _saves
        _saves += 1
        import chorus  # only inside chorus: packaging this model must not exit
        return _KillWhenPickled() if chorus.inside_chorus() and _saves == CRASH_ON_SAVE else 0

    def set_extra_state(self, state):
        pass


def build(**kwargs):
    built = model.build(**kwargs)
    built.save_crash_probe = SaveCrashProbe()
    return built
