"""What each step used (docs/usage.md): CPU and wall seconds, peak memory, bytes.

Revision ID: 0014_step_usage
Revises: 0013_permissions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_step_usage"
down_revision = "0013_permissions"
branch_labels = None
depends_on = None

# Nullable, no default: a step that finished before this migration (or never
# ran) was not measured, which is not the same as having used nothing.
_COLUMNS = (
    ("cpu_seconds", sa.Float),
    ("wall_seconds", sa.Float),
    ("peak_memory", sa.BigInteger),
    ("read_bytes", sa.BigInteger),
    ("written_bytes", sa.BigInteger),
)


def upgrade() -> None:
    # Plain ALTER TABLE ADD COLUMN on both SQLite and PostgreSQL: no copy of
    # a steps table of millions of rows.
    for name, kind in _COLUMNS:
        op.add_column("steps", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        for name, _ in _COLUMNS:
            batch.drop_column(name)
