# C types for run.py when compiled (see setup.py); the logic is in run.py.
cdef class RunContext:
    cdef public object env, drained, outcomes, routers, on_finished, pools
    cdef public bint exact, arrivals_done, arrival_alone
    cdef public double window_start_s, window_end_s
    cdef public Py_ssize_t outstanding
    cpdef request_finished(self, req)
    cpdef account(self, stats, double t0, double t1, double flops, double bytes_moved, double hbm_bytes)
