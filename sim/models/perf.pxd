# C types for perf.py when compiled (see setup.py); the logic is in perf.py.
# The decode-stretch closed forms run at every iteration boundary of an AR replica.
cimport cython


cdef class DecodeLine:
    cdef public double c0, c1, m0, m1, k


@cython.locals(a1=double, b1=double, a2=double, b2=double, split=long)
cpdef double decode_stretch_time_s(DecodeLine line, double context0, long batch, long n)

@cython.locals(guess=long, k=long)
cpdef long decode_stretch_iterations_done(DecodeLine line, double context0, long batch, long n, double elapsed_s)

@cython.locals(a1=double, b1=double, a2=double, b2=double, split=long, head=double,
               first_a=double, first_b=double, second_a=double, second_b=double)
cpdef long _solve_iterations(DecodeLine line, double context0, long batch, long n, double elapsed_s)

@cython.locals(half=double, lin=double)
cpdef long _quadratic_count(double a, double b, long _start, double budget)

@cython.locals(ahead_a=double, ahead_b=double, behind_a=double, behind_b=double, j=long)
cpdef long _first_index_where_second_wins(double a1, double b1, double a2, double b2, long n)

@cython.locals(count=long)
cpdef double _series(double a, double b, long start, long stop)
