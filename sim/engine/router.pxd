# C types for router.py when compiled (see setup.py); the logic is in router.py.
cimport cython
from sim.engine.indexed_heap cimport IndexedHeap
from sim.engine.prefix_cache cimport PrefixCache
from sim.engine.key_table cimport BlockIndex


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
    @cython.locals(cache=PrefixCache, holders=BlockIndex, n=Py_ssize_t, usable=Py_ssize_t, i=Py_ssize_t, load=Py_ssize_t, best=Py_ssize_t,
                   best_score=Py_ssize_t, score=Py_ssize_t, pos=Py_ssize_t, out=Py_ssize_t, base=Py_ssize_t)
    cpdef _by_prefix(self, req, candidates)
