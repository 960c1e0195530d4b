"""A complete CWL run's output object, kept so that the same run again is
answered whole (docs/cwl.md, "Reuse of a whole run").

Revision ID: 0021_cwl_output_object
Revises: 0020_workflow_versions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_cwl_output_object"
down_revision = "0020_workflow_versions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A collection holding cwl.output.json; none for the runs before.
    op.add_column("workflow_runs", sa.Column("output_object", sa.String(48), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workflow_runs") as batch:
        batch.drop_column("output_object")
