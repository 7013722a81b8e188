# Compiled with Cython (see setup.py); no C types declared: the logic is in core.py.
