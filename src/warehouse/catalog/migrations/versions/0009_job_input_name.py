"""The input of a job as it was given (a name), beside the PDH it resolved to.

Revision ID: 0009_job_input_name
Revises: 0008_mapreduce
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_job_input_name"
down_revision = "0008_mapreduce"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("input_name", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("input_name")
