"""Permissions: groups, their members, grants, and every recorder of a collection.

Revision ID: 0013_permissions
Revises: 0012_listing_parts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_permissions"
down_revision = "0012_listing_parts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    holders = op.create_table(
        "collection_holders",
        sa.Column("pdh", sa.String(48), primary_key=True),
        sa.Column("user", sa.String(255), primary_key=True),
    )
    op.create_table(
        "groups",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "group_members",
        sa.Column("group_name", sa.String(255), sa.ForeignKey("groups.name"), primary_key=True),
        sa.Column("user", sa.String(255), primary_key=True, index=True),
    )
    op.create_table(
        "grants",
        sa.Column("target", sa.String(1024), primary_key=True),
        sa.Column("grantee_kind", sa.String(8), primary_key=True),
        sa.Column("grantee", sa.String(255), primary_key=True),
        sa.Column("level", sa.String(8), nullable=False),
        sa.Column("granted_by", sa.String(255), nullable=False),
        sa.Column("granted_at", sa.Float, nullable=False),
    )
    # A private collection is read through the names pointing at it.
    op.create_index("ix_names_pdh", "names", ["pdh"])
    # Owners of what exists: the user who made it, where the catalog knows it.
    # Names, jobs and runs already keep theirs (names.owner, jobs.submitted_by,
    # workflow_runs.owner); a collection's recorders are its first
    # (created_by) and every user who recorded a listing of it since 0004.
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT pdh, created_by FROM collections "
            'UNION SELECT pdh, "user" FROM collection_listings'
        )
    ).all()
    if rows:
        op.bulk_insert(holders, [{"pdh": p, "user": u} for p, u in rows])
    # No mode is stored: a catalog without one is "open", as before.


def downgrade() -> None:
    op.drop_index("ix_names_pdh", "names")
    op.drop_table("grants")
    op.drop_table("group_members")
    op.drop_table("groups")
    op.drop_table("collection_holders")
