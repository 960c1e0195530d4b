"""S3 credentials for the S3 gateway (docs/s3-gateway.md).

Revision ID: 0017_s3_credentials
Revises: 0016_step_input_bytes
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_s3_credentials"
down_revision = "0016_step_input_bytes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "s3_credentials",
        sa.Column("access_key_id", sa.String(32), primary_key=True),
        sa.Column("user", sa.String(255), sa.ForeignKey("users.name"), nullable=False, index=True),
        sa.Column("token_hash", sa.String(64), nullable=False, index=True),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("s3_credentials")
