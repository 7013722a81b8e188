# C types for router.py when compiled (see setup.py); the logic is in router.py.
cimport cython
from sim.engine.indexed_heap cimport IndexedHeap


cdef class _MinIndex(IndexedHeap):
    cdef public object replicas, key
    cdef public Py_ssize_t base
    cdef long long[:] keys
    @cython.locals(ka=cython.longlong, kb=cython.longlong)
    cdef bint _before(self, long long a, long long b)
    cpdef changed(self, Py_ssize_t i)
    @cython.locals(i=cython.longlong)
    cpdef tuple top(self)


cdef class Router:
    cdef public object run, policy_name, pools, replicas, queue, _all, _subsets, indexes, _bases
    cdef public Py_ssize_t next_index
    cdef public bint central, _keyed, prefix_aware
