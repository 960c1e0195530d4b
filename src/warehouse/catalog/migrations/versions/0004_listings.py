"""md5sum listings kept per user (the first record's listing no longer wins).

Revision ID: 0004_listings
Revises: 0003
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0004_listings"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    listings = op.create_table(
        "collection_listings",
        sa.Column("pdh", sa.String(48), primary_key=True),
        sa.Column("user", sa.String(255), primary_key=True),
        sa.Column("file_md5s", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )
    # A listing recorded so far becomes its recorder's own: shown to nobody else.
    conn = op.get_bind()
    rows = conn.execute(
        sa.text("SELECT pdh, created_by, file_md5s FROM collections WHERE file_md5s IS NOT NULL")
    ).all()
    now = time.time()
    if rows:
        op.bulk_insert(
            listings,
            [{"pdh": p, "user": u, "file_md5s": f, "recorded_at": now} for p, u, f in rows],
        )
    conn.execute(sa.text("UPDATE collections SET file_md5s = NULL"))


def downgrade() -> None:
    op.drop_table("collection_listings")
