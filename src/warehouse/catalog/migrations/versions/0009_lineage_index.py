"""Indexes for lineage and reuse: jobs by input, output, log and function, runs by file.

Lineage walks (``wh lineage``, the lineage page, a collection's kind) look
jobs up by these columns; without an index each step of a walk scanned the
whole jobs table.

Revision ID: 0009_lineage_index
Revises: 0008_mapreduce
"""

from __future__ import annotations

from alembic import op

revision = "0009_lineage_index"
down_revision = "0008_mapreduce"
branch_labels = None
depends_on = None

# (index, table, columns), as catalog/schema.py declares them.
INDEXES = (
    ("ix_jobs_input_pdh", "jobs", ["input_pdh"]),
    ("ix_jobs_output_pdh_state", "jobs", ["output_pdh", "state"]),
    ("ix_jobs_log_pdh", "jobs", ["log_pdh"]),
    ("ix_jobs_function_pdh", "jobs", ["function_pdh"]),
    ("ix_workflow_runs_file_pdh", "workflow_runs", ["file_pdh"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)
