"""What a collection's blocks hold, for the quota (docs/server.md, "Quota").

Revision ID: 0015_block_bytes
Revises: 0014_step_usage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_block_bytes"
down_revision = "0014_step_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default and no backfill (that would read every manifest):
    # a collection recorded before counts its file bytes until a put records
    # it again. Plain ALTER TABLE ADD COLUMN on SQLite and PostgreSQL.
    op.add_column("collections", sa.Column("block_bytes", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("collections") as batch:
        batch.drop_column("block_bytes")
