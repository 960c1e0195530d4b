"""Several installations (DESIGN §4.4): reading from and copying to other clusters,
and placing steps next to their data (docs/clusters.md)."""
