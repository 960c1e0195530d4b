"""The blocks each step read, and their bytes, by where they came from
(docs/usage.md): ``blocks_cache`` … ``block_bytes_cluster``.

Revision ID: 0018_step_block_sources
Revises: 0017_s3_credentials
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_step_block_sources"
down_revision = "0017_s3_credentials"
branch_labels = None
depends_on = None

# Written out, not imported: a migration stays as it was when written.
_SOURCES = ("cache", "local", "s3", "keep", "cluster")
_COLUMNS = [f"blocks_{s}" for s in _SOURCES] + [f"block_bytes_{s}" for s in _SOURCES]


def upgrade() -> None:
    # Nullable, no default: a step that finished before this (or read no
    # block) said nothing, which the sums count as 0.
    for name in _COLUMNS:
        op.add_column("steps", sa.Column(name, sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
