# C types for indexed_heap.py when compiled (see setup.py); the logic is in indexed_heap.py.
cimport cython


cdef class IndexedHeap:
    cdef long long[:] heap, where
    cdef public long size, capacity

    cdef bint _before(self, long long a, long long b)
    cdef void _place(self, long pos, long long slot)
    @cython.locals(heap='long long[:]', where='long long[:]', slot=cython.longlong, parent=long, above=cython.longlong)
    cdef long _sift_up(self, long pos)
    @cython.locals(heap='long long[:]', where='long long[:]', slot=cython.longlong, size=long, child=long, right=long, below=cython.longlong)
    cdef void _sift_down(self, long pos)
    cdef void _restore(self, long pos)
    cdef void _push(self, long long slot)
    cdef void _remove(self, long pos)
