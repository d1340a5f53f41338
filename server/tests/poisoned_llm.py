"""Fault injection for the generation tests, shipped inside a test archive (never
part of chorus): the debug Llama 3 generator, except that a step over a prompt
holding a NUL byte kills the serving process with SIGKILL, as the kernel's OOM
killer would (nothing in the process can report it)."""

import os
import signal

import generate


class PoisonedGenerator(generate.Llama3Generator):
    def forward_step(self, tokens, positions, attention):
        if bool((tokens == 0).any()):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().forward_step(tokens, positions, attention)
