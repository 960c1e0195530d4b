"""Collections, names with history and writers, block-write accounting.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

PDH = sa.String(48)


def upgrade() -> None:
    op.create_table(
        "collections",
        sa.Column("pdh", PDH, primary_key=True),
        sa.Column("manifest_blocks", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("file_count", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
    )
    op.create_table(
        "names",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("pdh", PDH, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
    )
    op.create_table(
        "name_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False, index=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("old_pdh", PDH, nullable=True),
        sa.Column("new_pdh", PDH, nullable=True),
        sa.Column("by", sa.String(255), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.UniqueConstraint("name", "version"),
    )
    op.create_table(
        "name_writers",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("user", sa.String(255), primary_key=True),
    )
    op.create_table(
        "block_writes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("user", sa.String(255), nullable=False, index=True),
        sa.Column("md5", sa.String(32), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("new", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    for table in ("block_writes", "name_writers", "name_history", "names", "collections"):
        op.drop_table(table)
