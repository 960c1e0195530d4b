"""Collections GC has collected: never roots again.

Revision ID: 0007_durability
Revises: 0006_workflows
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_durability"
down_revision = "0006_workflows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "collected",
        sa.Column("pdh", sa.String(48), primary_key=True),
        sa.Column("collected_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("collected")
