"""The input of a job as it was given (a name), beside the PDH it resolved to.

Revision ID: 0011_job_input_name
Revises: 0010_placement
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_job_input_name"
down_revision = "0010_placement"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("input_name", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("input_name")
