# C types for timer.py when compiled (see setup.py); the logic is in timer.py.
cimport cython
from sim.engine.indexed_heap cimport IndexedHeap
from sim.engine.request cimport RouterFacing


cdef class _At:
    cdef public object callbacks


cdef class TimerDriven


cdef class ReplicaClock(IndexedHeap):
    cdef public object env, owners, pending, _callbacks
    cdef double[:] times
    cdef long long[:] prios

    @cython.locals(ta=double, tb=double)
    cdef bint _before(self, long long a, long long b)
    @cython.locals(pos=cython.Py_ssize_t)
    cpdef schedule(self, Py_ssize_t slot, double at_s)
    @cython.locals(pos=cython.Py_ssize_t)
    cpdef cancel(self, Py_ssize_t slot)
    @cython.locals(top=cython.longlong)
    cpdef _arm(self)
    @cython.locals(slot=cython.longlong, owner=TimerDriven)
    cpdef _fire(self, _entry)


cdef class TimerDriven(RouterFacing):
    cdef public object env
    cdef public ReplicaClock _clock
    cdef public Py_ssize_t _slot
    cpdef _start_timer_at(self, double at_s)
    cpdef _stop_timer(self)
    cpdef bint _timer_pending(self)
    cpdef _fired(self)
