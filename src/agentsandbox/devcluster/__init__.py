"""The local control plane used by tests, benchmarks, the demo and ``make cluster``."""

from .binaries import BinariesError, find_bin_dir
from .cluster import LIFECYCLE_LABEL, DevCluster
from .process import ClusterStartError

__all__ = ["LIFECYCLE_LABEL", "BinariesError", "ClusterStartError", "DevCluster", "find_bin_dir"]
