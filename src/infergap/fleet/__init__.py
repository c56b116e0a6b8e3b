"""Fleet audit: audit many nodes at once (a Ray cluster, or snapshot files) and find the nodes that
drifted from their identical peers.

- :mod:`infergap.fleet.node_task`: what runs on each node (``collect``, returned compressed).
- :mod:`infergap.fleet.runner`: gets the snapshots (Ray or files) and audits them in a process pool.
- :mod:`infergap.fleet.digest`: one node's audit reduced to what drift needs.
- :mod:`infergap.fleet.drift`: hardware classes, drift items, the ``infergap.fleet/1`` report.
"""

from infergap.fleet.digest import NodeDigest, NodeIdentity
from infergap.fleet.drift import DEFAULT_TOLERANCE, SCHEMA, DriftItem, FleetReport, build_report

__all__ = ["DEFAULT_TOLERANCE", "SCHEMA", "DriftItem", "FleetReport", "NodeDigest", "NodeIdentity", "build_report"]
