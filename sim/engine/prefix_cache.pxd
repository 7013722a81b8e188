# C types for prefix_cache.py when compiled (see setup.py); the logic is in prefix_cache.py.
cimport cython
from sim.engine.key_table cimport BlockIndex, KeyTable

cdef Py_ssize_t _TIERS, _HOST, _SSD, _MOVED, _SHARED, _TRAFFIC, _DROPPED, _PROMOTED, _W, _REF, _PREV, _NEXT  # C constants (module globals would be dict lookups)
cdef Py_ssize_t _UP, _DOWN, _KIDS, _LEN, _NHOST, _NSSD


@cython.final
cdef class PrefixCache:
    cdef public Py_ssize_t block_tokens, pages_per_block, cap, n_refd, evictable, free, size, used, position
    cdef public object capacity_blocks, shared
    cdef object st_buf, skey_buf
    cdef public KeyTable heads
    cdef public BlockIndex holders
    cdef public Py_ssize_t last
    cdef Py_ssize_t at_run, at_len
    cdef public long long moves
    cdef long long[::1] skey, tier_cap, count, first, moved, traffic
    cdef int[::1] st
    @cython.locals(r=Py_ssize_t, j=Py_ssize_t)
    cpdef index_into(self, BlockIndex holders, Py_ssize_t position)
    @cython.locals(holders=BlockIndex, r=Py_ssize_t)
    cpdef leave_index(self)
    cdef _grow(self)
    @cython.locals(p=int, n=int)
    cdef inline void _unlink(self, Py_ssize_t r) noexcept
    @cython.locals(last=int)
    cdef inline void _push_back(self, Py_ssize_t r) noexcept
    @cython.locals(d=Py_ssize_t)
    cdef Py_ssize_t _child(self, Py_ssize_t p, long long key) noexcept
    @cython.locals(r=Py_ssize_t)
    cdef Py_ssize_t _alloc(self) except -1
    @cython.locals(r=Py_ssize_t, j=Py_ssize_t)
    cdef Py_ssize_t _new_run(self, long long key, Py_ssize_t length, Py_ssize_t p) except -1
    @cython.locals(s=Py_ssize_t, length=Py_ssize_t, nhost=Py_ssize_t, nssd=Py_ssize_t, hbm=Py_ssize_t,
                   top_hbm=Py_ssize_t, top_host=Py_ssize_t, top_ssd=Py_ssize_t, p=Py_ssize_t, key=cython.longlong)
    cdef Py_ssize_t _split(self, Py_ssize_t r, Py_ssize_t e) except -1
    @cython.locals(p=Py_ssize_t)
    cdef _free_run(self, Py_ssize_t r)
    @cython.locals(n=Py_ssize_t)
    cpdef Py_ssize_t usable(self, tuple keys, Py_ssize_t prompt_tokens)
    cpdef Py_ssize_t hit_blocks(self, tuple keys, Py_ssize_t usable)
    @cython.locals(start=Py_ssize_t, j=Py_ssize_t, c=Py_ssize_t, key=cython.longlong)
    cdef Py_ssize_t _walk(self, tuple keys, Py_ssize_t n, Py_ssize_t usable, Py_ssize_t r, bint take,
                          bint count_moved) except -1
    @cython.locals(nhost=Py_ssize_t, nssd=Py_ssize_t, length=Py_ssize_t)
    cdef inline void _take(self, Py_ssize_t r, bint count_moved, bint linked) noexcept
    cdef Py_ssize_t _hold(self, Py_ssize_t r, Py_ssize_t j, bint count_moved) except -1
    @cython.locals(n=Py_ssize_t, r=Py_ssize_t, t=Py_ssize_t, fresh=Py_ssize_t, key=cython.longlong)
    cpdef Py_ssize_t acquire(self, tuple keys, Py_ssize_t usable)
    cpdef Py_ssize_t moved_from(self, Py_ssize_t t)
    cpdef long long traffic_blocks(self, Py_ssize_t i)
    cdef inline void _count(self, Py_ssize_t i, Py_ssize_t m) noexcept
    @cython.locals(r=Py_ssize_t, hbm=Py_ssize_t, m=Py_ssize_t, t=Py_ssize_t)
    cdef _evict(self, Py_ssize_t k)
    @cython.locals(low=Py_ssize_t, over=cython.longlong, u=Py_ssize_t, s=Py_ssize_t, n=cython.longlong)
    cdef _lower(self, Py_ssize_t r, Py_ssize_t src, Py_ssize_t t, Py_ssize_t m)
    @cython.locals(length=Py_ssize_t, key=cython.longlong, put=Py_ssize_t)
    cdef _drop(self, Py_ssize_t r, Py_ssize_t t, Py_ssize_t m)
    @cython.locals(r=Py_ssize_t, n=Py_ssize_t, m=Py_ssize_t, cap=Py_ssize_t, key=cython.longlong, nxt=cython.longlong,
                   over=Py_ssize_t)
    cpdef Py_ssize_t commit(self, tuple keys, Py_ssize_t last, Py_ssize_t hit, Py_ssize_t usable) except? -2
    @cython.locals(r=Py_ssize_t, length=Py_ssize_t)
    cpdef release(self, Py_ssize_t last, Py_ssize_t held)
    @cython.locals(keep=Py_ssize_t)
    cpdef trim_pages(self, Py_ssize_t free_pages)
    cpdef Py_ssize_t tier_blocks(self, Py_ssize_t t)
    @cython.locals(r=Py_ssize_t, t=Py_ssize_t, i=Py_ssize_t, length=Py_ssize_t, nhost=Py_ssize_t, nssd=Py_ssize_t, below=Py_ssize_t)
    cpdef list lru_order(self)
