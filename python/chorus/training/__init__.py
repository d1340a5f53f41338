"""chorus.training: the Python side of chorus' training jobs (one rank per interpreter).

The host (C++, chorus/training/training_job.h) creates a job's ranks and calls
the functions of `chorus.training.trainer` on every rank's interpreter at once:
create, step, save, load, export, evaluate, delete.
"""
