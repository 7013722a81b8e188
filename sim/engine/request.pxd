# C types for request.py when compiled (see setup.py); the logic is in request.py.
# int fields are Py_ssize_t (64-bit; a float assigned to one raises TypeError, as C long
# would not: it truncates), float fields C double (the values a run holds are far below 2**53)
cdef class Request:
    cdef public Py_ssize_t id, workload, prompt_tokens, output_tokens, steps, images, cfg, status, pool, replica, preemptions, sample_steps, run_seq, kv_offset, start_iter, generated, phase, leg, handoffs, verifier_calls, branches, cur_pool
    cdef public double arrival_at_s, service_s, admitted_at_s, first_token_at_s, done_at_s, share_s, denoiser_flops, acc_mark, reserved_bytes, leg_dispatched_at_s, handoff_s, handoff_wait_s, memory_wait_s, blocked_at_s
    cdef public object reason, phases, journey, draws, pool_shares


cdef class RouterFacing:
    pass
