"""Users and tokens, keep services, cluster settings; file digests of collections.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # JSON {path: md5} of the files as read by `wh put`, for the md5sum listing.
    op.add_column("collections", sa.Column("file_md5s", sa.Text, nullable=True))
    op.create_table(
        "users",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        # Only a SHA-256 of each token is kept: a stolen catalog gives no token.
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("user", sa.String(255), sa.ForeignKey("users.name"), nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
    )
    op.create_table(
        "keep_services",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("url", sa.String(1024), nullable=False, unique=True),
        sa.Column("registered_at", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
    )
    op.create_table(
        "settings",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("collections") as batch:
        batch.drop_column("file_md5s")
    for table in ("settings", "keep_services", "tokens", "users"):
        op.drop_table(table)
