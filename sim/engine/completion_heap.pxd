# C types for completion_heap.py when compiled (see setup.py); the logic is in completion_heap.py.
cimport cython


@cython.final
cdef class CompletionHeap:
    cdef long long[::1] keys
    cdef public Py_ssize_t size, capacity
    cdef public list reqs, free

    cdef _grow(self)
    @cython.locals(keys='long long[::1]', pos=Py_ssize_t, parent=Py_ssize_t, p=Py_ssize_t, q=Py_ssize_t, slot=Py_ssize_t)
    cpdef push(self, long long done, long long seq, req)
    cpdef long long next_done(self)
    cpdef long long first_seq(self)
    cpdef first(self)
    @cython.locals(keys='long long[::1]', slot=Py_ssize_t, size=Py_ssize_t, last=Py_ssize_t, done=cython.longlong,
                   seq=cython.longlong, moved=cython.longlong, pos=Py_ssize_t, child=Py_ssize_t, c=Py_ssize_t,
                   r=Py_ssize_t, q=Py_ssize_t)
    cpdef pop(self)
    cpdef list entries(self)
