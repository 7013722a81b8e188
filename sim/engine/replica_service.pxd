# C types for replica_service.py when compiled (see setup.py); the logic is in replica_service.py.
from sim.engine.request cimport RouterFacing

cdef class ServiceReplica(RouterFacing):
    cdef public object busy, env, index, listeners, max_batch, outstanding, pool, run, waiting
