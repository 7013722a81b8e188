# C types for indexed_heap.py when compiled (see setup.py); the logic is in indexed_heap.py.
cimport cython


cdef class IndexedHeap:
    cdef long long[:] heap, where
    cdef public Py_ssize_t size, capacity

    cdef bint _before(self, long long a, long long b)
    cdef void _place(self, Py_ssize_t pos, long long slot)
    @cython.locals(heap='long long[:]', where='long long[:]', slot=cython.longlong, parent=cython.Py_ssize_t, above=cython.longlong)
    cdef Py_ssize_t _sift_up(self, Py_ssize_t pos)
    @cython.locals(heap='long long[:]', where='long long[:]', slot=cython.longlong, size=cython.Py_ssize_t, child=cython.Py_ssize_t, right=cython.Py_ssize_t, below=cython.longlong)
    cdef void _sift_down(self, Py_ssize_t pos)
    cdef void _restore(self, Py_ssize_t pos)
    cdef void _push(self, long long slot)
    cdef void _remove(self, Py_ssize_t pos)
