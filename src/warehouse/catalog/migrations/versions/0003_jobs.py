"""Batch jobs and their steps.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PDH = sa.String(48)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("function", sa.Text, nullable=False),
        sa.Column("function_pdh", PDH, nullable=False),
        sa.Column("function_path", sa.Text, nullable=False),
        sa.Column("function_commit", sa.String(64), nullable=True),
        sa.Column("input_pdh", PDH, nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("cpus", sa.Integer, nullable=False),
        sa.Column("memory", sa.BigInteger, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("executor", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("control", sa.String(16), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("output_pdh", PDH, nullable=True),
        sa.Column("log_pdh", PDH, nullable=True),
        sa.Column("reuse_key", sa.String(64), nullable=False),
        sa.Column("reused_from", sa.Integer, nullable=True),
        sa.Column("steps_done", sa.Integer, nullable=False),
        sa.Column("steps_running", sa.Integer, nullable=False),
        sa.Column("steps_queued", sa.Integer, nullable=False),
        sa.Column("failed_attempts", sa.Integer, nullable=False),
        sa.Column("cpu_seconds", sa.Float, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("submitted_by", sa.String(255), nullable=False),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_control", "jobs", ["control"])
    op.create_index("ix_jobs_reuse_key", "jobs", ["reuse_key"])
    op.create_table(
        "steps",
        sa.Column("job", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("exit_status", sa.Integer, nullable=True),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("output", sa.Text, nullable=True),
        sa.Column("intermediate", sa.Text, nullable=True),
        sa.Column("log", sa.Text, nullable=True),
        sa.Column("log_tail", sa.Text, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("steps")
    op.drop_index("ix_jobs_reuse_key", "jobs")
    op.drop_index("ix_jobs_control", "jobs")
    op.drop_index("ix_jobs_state", "jobs")
    op.drop_table("jobs")
