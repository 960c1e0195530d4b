"""Counters a step reports (records in and out, bytes shuffled...), as JSON.

Revision ID: 0008_mapreduce
Revises: 0007_durability
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_mapreduce"
down_revision = "0007_durability"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("counters", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("counters")
