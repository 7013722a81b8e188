# C types for replica_ar.py when compiled (see setup.py); the logic is in replica_ar.py.
cimport cython

cdef Py_ssize_t PREFILL, DECODE, SPEC_DEN, _HOST, _SSD, _SHARED, _N_TRAFFIC  # C constants (module globals would be dict lookups)
from sim.engine.completion_heap cimport CompletionHeap
from sim.engine.prefix_cache cimport PrefixCache
from sim.engine.request cimport Request
from sim.engine.router cimport _MinIndex
from sim.engine.run cimport RunContext
from sim.engine.timer cimport TimerDriven
from sim.models.perf cimport DecodeLine, decode_stretch_iterations_done, decode_stretch_time_s
from sim.models.speculation cimport SpecPlan

@cython.final
cdef class ARReplica(TimerDriven):
    cdef public object _admitted, listeners, perf, pool, run, waiting, loading, releases
    cdef public SpecPlan spec
    cdef public CompletionHeap heap
    cdef long long[:] residues
    cdef public DecodeLine _seg_line
    cdef public double linear_flops_per_token, prefill_attn_flops_per_pair, prefill_window_attn_flops_per_token
    cdef public double host_bytes_per_s, ssd_bytes_per_s, ssd_latency_s, shared_bytes_per_s, shared_latency_s
    cdef public double _anchor, _decode_from, _end_at, _start, acc, _mix_t, _mix_flops, _mix_bytes, _mix_hbm, _wake
    cdef public Py_ssize_t _blocks_counter, _blocks_version, _next_done, _stale, _in_j0, _in_n, _mix_tokens
    cdef public Py_ssize_t _blocks_value, _kv_half, _kv_half_cap, _seg_b, _seg_context0, _seg_iters, _seg_version, _version
    cdef public Py_ssize_t block, cap_blocks, index, iters, max_batch, max_prefill_tokens, n_running, next_seq, outstanding, sum_offsets, watermark_blocks
    cdef public Py_ssize_t role, gnum, pinned, n_loading, cache_block
    cdef public PrefixCache prefix
    cdef long long[::1] _traffic_seen
    cdef long long _moves_seen
    cdef long long[::1] _prefill_tokens, _tier_blocks
    cdef double[::1] _prefill_saved
    cdef public Py_ssize_t chunk, _pending_w
    cdef public list _pending
    cdef public bint _busy, _cuttable, _inflight

    cdef inline Py_ssize_t _kv(self, Py_ssize_t counter)
    @cython.locals(residues='long long[:]', b=Py_ssize_t, rho=Py_ssize_t, n=cython.longlong, pad=cython.longlong, c=Py_ssize_t)
    cpdef Py_ssize_t blocks_used(self, Py_ssize_t counter)
    cpdef double kv_bytes_estimate(self, Py_ssize_t counter)
    cpdef _kv_sync(self)
    @cython.locals(req=Request)
    cpdef _add_running(self, Request req, Py_ssize_t tokens_now)
    cpdef _remove_running(self, Request req)
    @cython.locals(index=_MinIndex)
    cpdef submit(self, Request req)
    cpdef bint _alone_now(self)
    cpdef _boundary(self)
    @cython.locals(victim=Request)
    cpdef bint _preempt_if_needed(self)
    @cython.locals(req=Request, index=_MinIndex)
    cpdef _finish_completed(self)
    @cython.locals(run=Py_ssize_t)
    cpdef _note_progress(self, Request victim)
    @cython.locals(req=Request, index=_MinIndex, remote=bint, reserved=Py_ssize_t)
    cpdef list _admit(self)
    @cython.locals(need=Py_ssize_t, used=Py_ssize_t, ready=double)
    cpdef bint _reserve_now(self, Request req)
    @cython.locals(done=double)
    cpdef _reserve(self, Request req, Py_ssize_t need)
    @cython.locals(req=Request, tokens=Py_ssize_t)
    cpdef _join(self)
    @cython.locals(at=double)
    cpdef _sleep(self)
    cpdef release_at(self, Request req)
    cpdef _release_done(self)
    @cython.locals(req=Request, index=_MinIndex)
    cpdef _hand_off(self, list admitted)
    @cython.locals(req=Request)
    cpdef _send_early(self, list admitted, double end)
    @cython.locals(req=Request)
    cpdef bint _head_fits(self, Py_ssize_t counter)
    @cython.locals(line=DecodeLine)
    cpdef _begin(self, list admitted)
    @cython.locals(r=Request, c=Py_ssize_t, m=Py_ssize_t, block=Py_ssize_t, host=Py_ssize_t, ssd=Py_ssize_t, shared=Py_ssize_t)
    cpdef double _mixed_cost(self, list admitted)
    @cython.locals(kv=double, copy_s=double)
    cpdef double _cache_copy_s(self, Py_ssize_t host, Py_ssize_t ssd, Py_ssize_t shared)
    cpdef _cache_links(self, pc, layout)
    @cython.locals(hit=Py_ssize_t, usable=Py_ssize_t)
    cpdef _cache_admit(self, Request req)
    @cython.locals(usable=Py_ssize_t)
    cpdef _cache_commit(self, Request req)
    @cython.locals(room=Py_ssize_t, n=Py_ssize_t, pages=Py_ssize_t)
    cpdef _cache_trim(self)
    @cython.locals(run=RunContext, cache=PrefixCache, i=Py_ssize_t, v=cython.longlong, counted=bint, now=double)
    cpdef _cache_traffic(self)
    @cython.locals(run=RunContext, c=Py_ssize_t, n=Py_ssize_t, m=Py_ssize_t, saved=double, h=Py_ssize_t, d=Py_ssize_t, g=Py_ssize_t)
    cpdef _cache_first(self, Request req, double end)
    cdef inline double _prefill_flops(self, double new_tokens, double new_tokens_sq)
    cpdef _cut(self)
    cpdef _cut_at(self, double at)
    @cython.locals(elapsed=double, j=Py_ssize_t, k=Py_ssize_t)
    cpdef Py_ssize_t _boundary_index_at(self, double at, double anchor, DecodeLine line, Py_ssize_t context0, Py_ssize_t b, Py_ssize_t first, Py_ssize_t last)
    cpdef _finish(self, end=*)
    @cython.locals(req=Request)
    cpdef _finish_mixed(self, double end)
    @cython.locals(n=Py_ssize_t)
    cpdef Py_ssize_t _decode_tokens(self)
    @cython.locals(req=Request, room=Py_ssize_t)
    cpdef Py_ssize_t _chunk_room(self)
    @cython.locals(req=Request, budget=Py_ssize_t, m=Py_ssize_t)
    cpdef list _plan_chunks(self)
    @cython.locals(req=Request, n_decode=Py_ssize_t, new_tokens=Py_ssize_t, new_sq=double, cached=Py_ssize_t, copied=Py_ssize_t, pending_offsets=Py_ssize_t, m=Py_ssize_t, c=Py_ssize_t, tokens=Py_ssize_t, i=Py_ssize_t, t=double, flops=double, bytes_moved=double, block=Py_ssize_t, host=Py_ssize_t, ssd=Py_ssize_t, shared=Py_ssize_t, hbm=double)
    cpdef double _chunk_cost(self, Py_ssize_t n_chunks)
    @cython.locals(c0=Py_ssize_t)
    cpdef Py_ssize_t _chunk_skip_cached(self, Request req)
    @cython.locals(req=Request, prefix=PrefixCache, block=Py_ssize_t, i=Py_ssize_t, upto=Py_ssize_t, whole=Py_ssize_t)
    cpdef _cache_commit_chunks(self, Py_ssize_t n_chunks)
    @cython.locals(req=Request, i=Py_ssize_t)
    cpdef list _last_chunks(self, list chunked)
    @cython.locals(req=Request, t=double, tokens=double, done=Py_ssize_t, i=Py_ssize_t, block=Py_ssize_t, handed=list)
    cpdef _finish_chunks(self, double end)
    cpdef _first_token(self, Request req, double end)
    @cython.locals(w=Py_ssize_t, extra=Py_ssize_t)
    cpdef _prefilled(self, Request req, Py_ssize_t admitted_iter, double end)
