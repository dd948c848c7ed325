"""A real Ray cluster on this machine for the Ray executor's tests: a head that runs no trials and two worker
nodes with 2 CPUs each, on loopback only, started once per test module (Ray is slow to start)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
NODE_ARGS = {"num_cpus": 2, "object_store_memory": 80 * 1024 * 1024}
sys.path.insert(0, str(HERE.parent / "engine"))  # engine_tasks: the engine tests' task directories


class RayCluster:
    """The test cluster: its address and its worker nodes (a test may kill one and add another)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.address: str = cluster.address
        self.workers: list = []

    def add_worker(self):
        """Start one more worker node and wait until it is up."""
        node = self.cluster.add_node(**NODE_ARGS)
        self.cluster.wait_for_nodes()
        self.workers.append(node)
        return node

    def kill_worker(self, node) -> None:
        """Kill a worker node at once (its raylet and every worker process on it), as a crashed machine."""
        self.cluster.remove_node(node, allow_graceful=False)
        self.workers.remove(node)


@contextlib.contextmanager
def restored_process_state() -> Iterator[None]:
    """Put back, after the block, the environment, sys.path and signal handlers of this process as they were
    before it: `ray.init` sets PYTHONBREAKPOINT and RAY_CLIENT_MODE and a SIGTERM handler that `ray.shutdown`
    leaves in place, and the cluster needs its own PYTHONPATH; none of it may reach the tests that follow."""
    environ, path = dict(os.environ), list(sys.path)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@pytest.fixture(scope="module")
def ray_cluster():
    """Head (no CPUs, so trials run on the workers) + two worker nodes; the driver connected to it. One per
    module: the cluster, its worker processes and the idle sandboxes they keep are gone before the next
    module's tests, which may count this process's sandboxes."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'evsys[ray]'")
    from ray.cluster_utils import Cluster

    with restored_process_state():
        # nodes (and their workers) inherit this environment: loopback addresses only; evsys and this
        # directory's verifier module importable, as a runtime env would make them on a real cluster
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")) if p
        )
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        head = {"num_cpus": 0, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args=head)
        try:
            handle = RayCluster(cluster)
            handle.add_worker()
            handle.add_worker()
            ray.init(address=cluster.address, log_to_driver=False)
            yield handle
        finally:
            ray.shutdown()
            cluster.shutdown()
