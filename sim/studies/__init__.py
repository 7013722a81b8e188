"""What is built from many runs: ``sweep`` / ``sweep_spec`` (grids over scenario
fields), ``planner`` / ``planner_capacity`` / ``planner_report`` (the cheapest fleet that
meets every SLO), ``headroom`` (load multiplier by re-simulation), and ``validate`` /
``validate_report`` / ``mlperf`` / ``calibration`` (the perf model against MLPerf).
"""
