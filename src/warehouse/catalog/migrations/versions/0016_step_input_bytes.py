"""What each step read of the warehouse's files (docs/usage.md): ``input_bytes``.

Revision ID: 0016_step_input_bytes
Revises: 0015_block_bytes
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_step_input_bytes"
down_revision = "0015_block_bytes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: a step that finished before this (or read
    # nothing through a reader) said nothing, which the sums count as 0.
    op.add_column("steps", sa.Column("input_bytes", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("input_bytes")
