"""Placement: a job's input bytes, and those its steps found on their own host.

Revision ID: 0010_placement
Revises: 0009_lineage_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_placement"
down_revision = "0009_lineage_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("input_bytes", sa.BigInteger, nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("local_bytes", sa.BigInteger, nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("local_bytes")
        batch.drop_column("input_bytes")
