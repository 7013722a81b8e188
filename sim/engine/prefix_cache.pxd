# C types for prefix_cache.py when compiled (see setup.py); the logic is in prefix_cache.py.
cimport cython


@cython.final
cdef class PrefixCache:
    cdef public Py_ssize_t block_tokens, pages_per_block
    cdef public object capacity_blocks
    cdef public dict refs
    cdef public object lru, host
    cdef public Py_ssize_t host_blocks
    cpdef Py_ssize_t usable(self, tuple keys, Py_ssize_t prompt_tokens)
    @cython.locals(n=Py_ssize_t, refs=dict)
    cpdef Py_ssize_t hit_blocks(self, tuple keys, Py_ssize_t usable)
    @cython.locals(refs=dict, moved=Py_ssize_t)
    cpdef Py_ssize_t acquire(self, tuple keys, Py_ssize_t n)
    cpdef _evict_oldest(self)
    @cython.locals(refs=dict)
    cpdef commit(self, tuple keys, Py_ssize_t hit, Py_ssize_t usable)
    @cython.locals(refs=dict, i=Py_ssize_t, count=Py_ssize_t)
    cpdef release(self, tuple keys, Py_ssize_t held)
    @cython.locals(per=Py_ssize_t, keep=Py_ssize_t)
    cpdef trim_pages(self, Py_ssize_t free_pages)
