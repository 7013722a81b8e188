# C types for timer.py when compiled (see setup.py); the logic is in timer.py.
from sim.engine.request cimport RouterFacing


cdef class _At:
    cdef public object callbacks


cdef class StaleTimers:
    cdef public long pending, purged


cdef class TimerDriven(RouterFacing):
    cdef public object env, _timer, _on_timer_callbacks
    cdef public StaleTimers _stale
    cdef public long _priority
    cpdef _start_timer_at(self, double at_s)
