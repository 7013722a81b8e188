# C types for prefix_cache.py when compiled (see setup.py); the logic is in prefix_cache.py.
cimport cython

cdef Py_ssize_t _LISTS  # a C constant (a module global would be a dict lookup)


@cython.final
cdef class PrefixCache:
    cdef public Py_ssize_t block_tokens, pages_per_block, cap, n_refd, evictable, free, size
    cdef public object capacity_blocks, bit, nbit, holders
    cdef public dict where
    cdef long long[::1] tier_cap, count, moved
    cdef public list key
    cdef object _zero
    cdef int[::1] ref, tier, prev, nxt
    cpdef index_into(self, dict holders, Py_ssize_t position)
    @cython.locals(old=Py_ssize_t, size=Py_ssize_t, i=Py_ssize_t, ref='int[::1]', tier='int[::1]',
                   prev='int[::1]', nxt='int[::1]')
    cdef _grow(self)
    @cython.locals(p=int, n=int)
    cdef inline void _unlink(self, Py_ssize_t s)
    @cython.locals(last=int)
    cdef inline void _push_back(self, Py_ssize_t t, Py_ssize_t s)
    @cython.locals(s=Py_ssize_t)
    cdef Py_ssize_t _new_slot(self, key) except -1
    cdef _drop(self, Py_ssize_t s)
    @cython.locals(n=Py_ssize_t)
    cpdef Py_ssize_t usable(self, tuple keys, Py_ssize_t prompt_tokens)
    @cython.locals(n=Py_ssize_t, where=dict)
    cpdef Py_ssize_t hit_blocks(self, tuple keys, Py_ssize_t usable)
    cpdef new_slots(self, Py_ssize_t usable)
    @cython.locals(where=dict, n=Py_ssize_t, s=Py_ssize_t, t=Py_ssize_t, ref='int[::1]', tier='int[::1]',
                   count='long long[::1]', moved='long long[::1]')
    cpdef Py_ssize_t acquire(self, tuple keys, int[::1] slots, Py_ssize_t usable)
    cpdef Py_ssize_t moved_from(self, Py_ssize_t t)
    @cython.locals(tier_cap='long long[::1]', count='long long[::1]', cap=cython.longlong)
    cdef _demote(self, Py_ssize_t s, Py_ssize_t t)
    @cython.locals(s=Py_ssize_t)
    cdef _evict_oldest(self)
    @cython.locals(where=dict, i=Py_ssize_t, s=Py_ssize_t, t=Py_ssize_t, cap=Py_ssize_t, ref='int[::1]',
                   tier='int[::1]', count='long long[::1]')
    cpdef commit(self, tuple keys, int[::1] slots, Py_ssize_t hit, Py_ssize_t usable)
    @cython.locals(ref='int[::1]', i=Py_ssize_t, s=Py_ssize_t)
    cpdef release(self, int[::1] slots, Py_ssize_t held)
    @cython.locals(keep=Py_ssize_t)
    cpdef trim_pages(self, Py_ssize_t free_pages)
    cpdef Py_ssize_t tier_blocks(self, Py_ssize_t t)
