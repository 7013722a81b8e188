"""One run's tables and what is shown of them: :mod:`~sim.results.tables` (run every
fleet and assemble ``Results``), ``metrics`` (latency tails, utilisation, costs),
``export`` (atomic CSV/Parquet writers), ``planner_csv``, ``report_text``,
``report_html``, ``charts`` and ``progress``. Never imports ``sim.studies``.
"""
