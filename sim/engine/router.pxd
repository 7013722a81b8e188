# C types for router.py when compiled (see setup.py); the logic is in router.py.
cdef class _MinIndex:
    cdef public object replicas, key, keys, heap
    cdef public long base, limit
    cpdef changed(self, long i)
    cpdef object top(self)


cdef class Router:
    cdef public object run, policy_name, pools, replicas, queue, _all, _subsets, indexes
    cdef public long next_index
    cdef public bint central, _keyed
