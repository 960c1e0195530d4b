"""Workflow runs, their nodes, and the parts of combined collections.

Revision ID: 0006_workflows
Revises: 0005_regol
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_workflows"
down_revision = "0005_regol"
branch_labels = None
depends_on = None

PDH = sa.String(48)


def upgrade() -> None:
    op.create_table(
        "workflow_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workflow", sa.String(255), nullable=False),
        sa.Column("file_pdh", PDH, nullable=False),
        sa.Column("inputs", sa.Text, nullable=False),
        sa.Column("pins", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("control", sa.String(16), nullable=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("name_outputs", sa.String(255), nullable=True),
        sa.Column("outputs", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("run_key", sa.String(64), nullable=False),
        sa.Column("driver", sa.String(255), nullable=True),
        sa.Column("heartbeat_at", sa.Float, nullable=True),
    )
    op.create_index("ix_workflow_runs_state", "workflow_runs", ["state"])
    op.create_index("ix_workflow_runs_owner", "workflow_runs", ["owner"])
    op.create_index("ix_workflow_runs_run_key", "workflow_runs", ["run_key"])
    op.create_table(
        "workflow_nodes",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("workflow_runs.id"), primary_key=True),
        sa.Column("node", sa.String(255), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("function", sa.Text, nullable=False),
        sa.Column("job_id", sa.Integer, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reused", sa.Boolean, nullable=False),
        sa.Column("input_pdh", PDH, nullable=True),
        sa.Column("output_pdh", PDH, nullable=True),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("depends_on", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_index("ix_workflow_nodes_job_id", "workflow_nodes", ["job_id"])
    op.create_table(
        "collection_parts",
        sa.Column("pdh", PDH, primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("dir", sa.String(1024), nullable=False),
        sa.Column("part_pdh", PDH, nullable=False),
    )
    op.create_index("ix_collection_parts_part_pdh", "collection_parts", ["part_pdh"])


def downgrade() -> None:
    op.drop_index("ix_collection_parts_part_pdh", "collection_parts")
    op.drop_table("collection_parts")
    op.drop_index("ix_workflow_nodes_job_id", "workflow_nodes")
    op.drop_table("workflow_nodes")
    op.drop_index("ix_workflow_runs_run_key", "workflow_runs")
    op.drop_index("ix_workflow_runs_owner", "workflow_runs")
    op.drop_index("ix_workflow_runs_state", "workflow_runs")
    op.drop_table("workflow_runs")
