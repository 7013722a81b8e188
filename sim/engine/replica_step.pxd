# C types for replica_step.py when compiled (see setup.py); the logic is in replica_step.py.
from sim.engine.timer cimport TimerDriven

cdef class StepReplica(TimerDriven):
    cdef public object _anchor, _busy, _cuttable, _j0, _seg_steps, _seg_version, _start, _step_bytes, _step_s, _steps, _version, acc, blocked, flops, free_bytes, heap, index, kernels, listeners, max_batch, members, outstanding, perf, pool, reserved, run, next_seq, stage_perfs, steps_done, waiting, width
