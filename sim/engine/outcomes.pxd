# C types for outcomes.py when compiled (see setup.py); the logic is in outcomes.py.
cimport cython
from sim.engine.request cimport Request


cdef class Outcomes:
    cdef public object sink, _ids, live, _reasons, _written, _table, _share_parts, drafted
    cdef public object _share_ids, _share_pools, _share_s
    cdef public object _int_buffer, _float_buffer
    cdef long long[::1] _ints
    cdef double[::1] _floats
    cdef public Py_ssize_t _n, _capacity

    cpdef arrived(self, Request req)
    @cython.locals(n=Py_ssize_t, i=Py_ssize_t, f=Py_ssize_t, ints='long long[::1]', floats='double[::1]', before=double,
                   last=double, draft=Py_ssize_t)
    cpdef record(self, Request req)
