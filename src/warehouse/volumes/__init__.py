"""Volumes: where blocks are kept, behind one small interface (DESIGN §4.1).

``base.open_volume(spec)`` gives a local directory volume or, for
``s3://BUCKET/PREFIX?endpoint=URL``, an S3 volume (``s3``, docs/s3.md);
``store.VolumeBlockStore`` is the embedded warehouse's store on an S3
volume. Nothing is imported here: boto3 loads only when an S3 volume is named.
"""
