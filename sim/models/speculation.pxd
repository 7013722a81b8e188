# C types for speculation.py when compiled (see setup.py); the logic is in speculation.py.
# A speculating replica asks its SpecPlan for the step's line, work and mixed iteration
# at every boundary.
cimport cython
from sim.models.perf cimport DecodeLine


cdef class SpecPlan:
    cdef public object spec, acceptance, perf, draft, _lines, remote
    cdef public Py_ssize_t k, growth_num
    cdef public double tokens_per_step, growth, draft_resident_bytes, draft_kv_bytes_per_token, lin, attn, kv, d_lin, d_attn

    @cython.locals(line=DecodeLine, v=DecodeLine, d=DecodeLine)
    cpdef tuple _of(self, Py_ssize_t batch)
    cpdef DecodeLine line(self, Py_ssize_t batch)
    cpdef double step_time_s(self, Py_ssize_t batch, double context_tokens)
    @cython.locals(q=Py_ssize_t, contexts=double, flops=double, moved=double, entry=tuple)
    cpdef tuple stretch_work(self, Py_ssize_t batch, double context0, Py_ssize_t n)
    @cython.locals(q=Py_ssize_t, t=double, flops=double, moved=double, td=double, fd=double, md=double, entry=tuple, d=DecodeLine)
    cpdef tuple mixed_cost(self, double new_tokens, double new_sq, Py_ssize_t n_decode, double context, double copied, double cached=*)
