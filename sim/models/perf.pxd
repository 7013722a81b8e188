# C types for perf.py when compiled (see setup.py); the logic is in perf.py.
# The decode-stretch closed forms run at every iteration boundary of an AR replica.
cimport cython


cdef class DecodeLine:
    cdef public double c0, c1, m0, m1, k, g, dn
    cdef public DecodeLine draft


@cython.locals(growth=double, a1=double, b1=double, a2=double, b2=double, split=cython.Py_ssize_t)
cpdef double decode_stretch_time_s(DecodeLine line, double context0, Py_ssize_t batch, Py_ssize_t n)

@cython.locals(a1=double, b1=double, a2=double, b2=double, split=cython.Py_ssize_t)
cpdef double _line_stretch_s(DecodeLine line, double context0, double growth, Py_ssize_t n)

@cython.locals(guess=cython.Py_ssize_t, k=cython.Py_ssize_t)
cpdef Py_ssize_t decode_stretch_iterations_done(DecodeLine line, double context0, Py_ssize_t batch, Py_ssize_t n, double elapsed_s)

@cython.locals(a1=double, b1=double, a2=double, b2=double, split=cython.Py_ssize_t, head=double,
               first_a=double, first_b=double, second_a=double, second_b=double)
cpdef Py_ssize_t _solve_iterations(DecodeLine line, double context0, double growth, Py_ssize_t n, double elapsed_s)

@cython.locals(half=double, lin=double)
cpdef Py_ssize_t _quadratic_count(double a, double b, Py_ssize_t _start, double budget)

@cython.locals(ahead_a=double, ahead_b=double, behind_a=double, behind_b=double, j=cython.Py_ssize_t)
cpdef Py_ssize_t _first_index_where_second_wins(double a1, double b1, double a2, double b2, Py_ssize_t n)

@cython.locals(count=cython.Py_ssize_t)
cpdef double _series(double a, double b, Py_ssize_t start, Py_ssize_t stop)

@cython.locals(d=DecodeLine, va1=double, vb1=double, va2=double, vb2=double, da1=double, db1=double, da2=double,
               db2=double, vs=cython.Py_ssize_t, ds=cython.Py_ssize_t, fixed=double, first_cut=cython.Py_ssize_t,
               second_cut=cython.Py_ssize_t, spent=double, start=cython.Py_ssize_t, stop=cython.Py_ssize_t, a=double,
               b=double, piece=double)
cpdef Py_ssize_t _solve_spec_iterations(DecodeLine line, double context0, double growth, Py_ssize_t n, double elapsed_s)
