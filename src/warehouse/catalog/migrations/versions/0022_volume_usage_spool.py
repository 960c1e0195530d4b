"""Per volume: the spooled record a ``volume_usage`` row was folded from, so
a record is folded once however many folds race or stop midway
(docs/usage.md, "The spool").

Revision ID: 0022_volume_usage_spool
Revises: 0021_cwl_output_object
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_volume_usage_spool"
down_revision = "0021_cwl_output_object"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # None for the rows written directly (before the spool, and a keep server's).
    op.add_column("volume_usage", sa.Column("record", sa.String(32), nullable=True))
    op.create_index("ux_volume_usage_record", "volume_usage", ["record"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_volume_usage_record", "volume_usage")
    with op.batch_alter_table("volume_usage") as batch:
        batch.drop_column("record")
