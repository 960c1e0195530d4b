"""Listings too big for one value, kept in parts.

Revision ID: 0012_listing_parts
Revises: 0011_job_input_name
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_listing_parts"
down_revision = "0011_job_input_name"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows of collection_listings already recorded are whole values and stay
    # as they are: a listing has parts only where a new put wrote them.
    op.create_table(
        "collection_listing_parts",
        sa.Column("pdh", sa.String(48), primary_key=True),
        sa.Column("user", sa.String(255), primary_key=True),
        sa.Column("part", sa.Integer, primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("collection_listing_parts")
