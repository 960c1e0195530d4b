"""A version on workflow runs and nodes: what changed since a client last
looked (docs/workflows.md, "Following a run").

Revision ID: 0020_workflow_versions
Revises: 0019_volume_usage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_workflow_versions"
down_revision = "0019_volume_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing runs and nodes start at 0: a client following one reads it
    # whole first, and only later changes are raised above that.
    for table in ("workflow_runs", "workflow_nodes"):
        op.add_column(table, sa.Column("version", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    for table in ("workflow_nodes", "workflow_runs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("version")
