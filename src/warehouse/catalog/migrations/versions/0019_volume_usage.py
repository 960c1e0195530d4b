"""Per volume: requests by kind and the bytes stored, sampled over time
(docs/usage.md, "Per volume").

Revision ID: 0019_volume_usage
Revises: 0018_step_block_sources
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_volume_usage"
down_revision = "0018_step_block_sources"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "volume_usage",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("volume", sa.String(1024), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("stored_bytes", sa.BigInteger, nullable=True),
        sa.Column("gets", sa.BigInteger, nullable=False),
        sa.Column("puts", sa.BigInteger, nullable=False),
        sa.Column("lists", sa.BigInteger, nullable=False),
        sa.Column("deletes", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_volume_usage_volume_at", "volume_usage", ["volume", "at"])


def downgrade() -> None:
    op.drop_index("ix_volume_usage_volume_at", "volume_usage")
    op.drop_table("volume_usage")
