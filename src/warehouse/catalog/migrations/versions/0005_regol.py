"""Regol: watched jobs and their runs at each commit.

Revision ID: 0005_regol
Revises: 0004_listings
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_regol"
down_revision = "0004_listings"
branch_labels = None
depends_on = None

PDH = sa.String(48)


def upgrade() -> None:
    op.create_table(
        "regol_watches",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("function", sa.Text, nullable=False),
        sa.Column("repository", sa.Text, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
    )
    op.create_table(
        "regol_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("watch", sa.Integer, sa.ForeignKey("regol_watches.id"), nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("commit_time", sa.Float, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("job", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("output_pdh", PDH, nullable=True),
        sa.Column("run_time", sa.Float, nullable=True),
        sa.Column("cpu_seconds", sa.Float, nullable=True),
        sa.Column("equals_previous", sa.Boolean, nullable=True),
        sa.Column("reused", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("watch", "commit"),
    )


def downgrade() -> None:
    op.drop_table("regol_runs")
    op.drop_table("regol_watches")
