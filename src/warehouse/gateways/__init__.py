"""Gateways: the warehouse where existing tools look for data, over S3 and
WebDAV (docs/s3-gateway.md, docs/mount.md)."""
