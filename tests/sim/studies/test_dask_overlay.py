"""A ``--catalog`` overlay reaches the workers of a remote Dask cluster (started before the
overlay was chosen, so they do not inherit this process's environment), and is taken
back when a later run has none."""

from __future__ import annotations

import pytest

from fleets.catalog_io import load_catalog, use_overlay
from sim.studies.sweep import DaskExecutor


def _worker_eta_c() -> float:
    from fleets.catalog_io import load_catalog as worker_load

    return worker_load().accelerator("mi300x").compute_efficiency


@pytest.mark.slow
def test_remote_workers_get_the_overlay_and_lose_it_after(tmp_path):
    from distributed import LocalCluster

    shipped = load_catalog().accelerator("mi300x").compute_efficiency
    overlay = tmp_path / "overlay.csv"
    overlay.write_text("key,compute_efficiency\nmi300x,0.123\n")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster:  # started with no overlay in the environment
        try:
            use_overlay(overlay)
            with DaskExecutor(cluster.scheduler_address, 1) as ex:
                assert ex.client.submit(_worker_eta_c, pure=False).result() == 0.123
        finally:
            use_overlay(None)
        with DaskExecutor(cluster.scheduler_address, 1) as ex:
            assert ex.client.submit(_worker_eta_c, pure=False).result() == shipped
