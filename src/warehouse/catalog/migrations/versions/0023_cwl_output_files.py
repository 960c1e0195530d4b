"""The one collection of a CWL run's output files, whose ``keep:`` locations
its output object gives: kept (a gc root) while its run is kept.

Revision ID: 0023_cwl_output_files
Revises: 0022_volume_usage_spool
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_cwl_output_files"
down_revision = "0022_volume_usage_spool"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # None for runs before, and for runs whose outputs hold no file.
    op.add_column("workflow_runs", sa.Column("output_files", sa.String(48), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workflow_runs") as batch:
        batch.drop_column("output_files")
