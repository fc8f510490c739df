"""The local control plane used by tests, benchmarks, the demo and ``make cluster``."""

from .binaries import BinariesError, find_bin_dir
from .cluster import LIFECYCLE_LABEL, ClusterStartError, DevCluster

__all__ = ["LIFECYCLE_LABEL", "BinariesError", "ClusterStartError", "DevCluster", "find_bin_dir"]
