# C types for key_table.py when compiled (see setup.py); the logic is in key_table.py.
cimport cython

cdef long long _EMPTY, _LOW31, _LOW32, _GOLDEN
cdef Py_ssize_t _NARROW, _B


@cython.final
cdef class KeyTable:
    cdef public Py_ssize_t tmask, tshift, tused, width
    cdef long long[::1] table
    cdef _free(self, Py_ssize_t entries)
    cpdef Py_ssize_t _home(self, long long key) noexcept  # cpdef: tests read the layout
    @cython.locals(mask=Py_ssize_t, i=Py_ssize_t, k=cython.longlong)
    cdef inline Py_ssize_t _at(self, long long key) noexcept
    @cython.locals(i=Py_ssize_t)
    cpdef long long get(self, long long key, long long missing) noexcept
    @cython.locals(i=Py_ssize_t)
    cdef Py_ssize_t _entry(self, long long key) except -1
    @cython.locals(i=Py_ssize_t)
    cpdef put(self, long long key, long long value)
    cpdef erase(self, long long key)
    @cython.locals(mask=Py_ssize_t, w=Py_ssize_t, j=Py_ssize_t, h=Py_ssize_t, k=cython.longlong, f=Py_ssize_t)
    cdef void _erase_at(self, Py_ssize_t i) noexcept
    @cython.locals(old='long long[::1]', n=Py_ssize_t, w=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, k=cython.longlong,
                   f=Py_ssize_t)
    cdef _rehash(self, Py_ssize_t entries)


@cython.final
cdef class BlockIndex:
    cdef public bint narrow
    cdef public dict wide
    cdef public KeyTable buckets
    cdef public Py_ssize_t held
    cpdef add(self, long long key, Py_ssize_t position)
    @cython.locals(bit=cython.longlong, b=cython.longlong, i=Py_ssize_t, k=cython.longlong, f=Py_ssize_t, j=Py_ssize_t)
    cpdef add_run(self, long long key, Py_ssize_t length, Py_ssize_t position)
    cpdef remove(self, long long key, Py_ssize_t position)
    @cython.locals(bit=cython.longlong, rest=cython.longlong, i=Py_ssize_t, f=Py_ssize_t, k=cython.longlong,
                   end=cython.longlong, b=cython.longlong, stop=cython.longlong, empty=bint, wide_rest=object)
    cpdef remove_run(self, long long key, Py_ssize_t length, Py_ssize_t position)
    @cython.locals(i=Py_ssize_t)
    cpdef long long mask(self, long long key) noexcept
    cpdef object get(self, long long key)
