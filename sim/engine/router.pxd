# C types for router.py when compiled (see setup.py); the logic is in router.py.
cimport cython
from sim.engine.indexed_heap cimport IndexedHeap
from sim.engine.prefix_cache cimport PrefixCache
from sim.engine.key_table cimport BlockIndex
from sim.engine.request cimport Request


cdef class _MinIndex(IndexedHeap):
    cdef public object replicas, key
    cdef public Py_ssize_t base
    cdef long long[:] keys
    @cython.locals(ka=cython.longlong, kb=cython.longlong)
    cdef bint _before(self, long long a, long long b)
    cpdef changed(self, Py_ssize_t i)
    @cython.locals(i=cython.longlong)
    cpdef tuple top(self)
    cdef inline Py_ssize_t least(self)


@cython.final
cdef class _PrefixPool:
    cdef public list replicas
    cdef public _MinIndex index
    cdef public Py_ssize_t base, load, block_tokens
    cdef public BlockIndex holders


cdef class Router:
    cdef public object run, policy_name, pools, replicas, queue, _all, _subsets, indexes
    cdef public list _bases
    cdef public Py_ssize_t next_index
    cdef public bint central, _keyed, prefix_aware
    cdef Py_ssize_t _best, _best_score
    @cython.locals(slot=Py_ssize_t, pool=_PrefixPool, cache=PrefixCache, usable=Py_ssize_t)
    cpdef _by_prefix(self, Request req, candidates)
    cdef inline void _offer(self, Py_ssize_t pos, Py_ssize_t score)
    @cython.locals(replicas=list, holders=BlockIndex, index=_MinIndex, base=Py_ssize_t, load=Py_ssize_t, least=Py_ssize_t,
                   pos=Py_ssize_t, cache=PrefixCache, seen=cython.longlong, alive=cython.longlong, star=cython.longlong,
                   after=cython.longlong, ended=cython.longlong, low=cython.longlong, n=Py_ssize_t, i=Py_ssize_t,
                   tokens=Py_ssize_t)
    cdef _walk_narrow(self, tuple keys, Py_ssize_t usable, _PrefixPool pool)
    @cython.locals(replicas=list, holders=BlockIndex, index=_MinIndex, base=Py_ssize_t, load=Py_ssize_t, least=Py_ssize_t,
                   pos=Py_ssize_t, cache=PrefixCache, n=Py_ssize_t, i=Py_ssize_t, tokens=Py_ssize_t)
    cdef _walk_wide(self, tuple keys, Py_ssize_t usable, _PrefixPool pool)


@cython.locals(i=Py_ssize_t)
cdef Py_ssize_t _bit_index(long long bit)
