# C types for request.py when compiled (see setup.py); the logic is in request.py.
# int fields are Py_ssize_t (64-bit; a float assigned to one raises TypeError, as C long
# would not: it truncates), float fields C double (the values a run holds are far below 2**53)
#
# The C struct has the fields in the order declared here. An AR replica reads and writes
# the first 13 (104 bytes, two or three cache lines) when it admits a request, at its
# first token and at its completion; with ~24,000 requests in flight at 4,096 replicas a
# request is out of cache each time, so each line not touched is a miss saved.
cdef class Request:
    cdef public Py_ssize_t run_seq, kv_offset, start_iter, generated, branches, prompt_tokens, output_tokens, status
    cdef public double share_s, acc_mark, admitted_at_s, first_token_at_s, done_at_s
    cdef public Py_ssize_t id, workload, replica, pool, cur_pool, preemptions, steps, images, cfg, sample_steps, phase, leg, handoffs, verifier_calls
    cdef public double arrival_at_s, service_s, denoiser_flops, reserved_bytes, leg_dispatched_at_s, handoff_s, handoff_wait_s, memory_wait_s, blocked_at_s
    cdef public object reason, phases, journey, draws, pool_shares
    cdef public Py_ssize_t variant, adapter, lora
    cdef public Py_ssize_t spec_done, kv_remote, kv_src_pool, kv_src_replica, decode_pool
    cdef public double prefill_at_s, kv_ready_at_s, kv_done_at_s, decode_queue_s, kv_transfer_bytes, kv_transfer_s
    cdef public object prefix
    cdef public Py_ssize_t cache_last, cache_hit, cache_held, cached_tokens, cache_host, host_cached_tokens, cache_ssd, ssd_cached_tokens, cache_shared, shared_cached_tokens
    cdef public double prefill_flops_saved


cdef class RouterFacing:
    pass
