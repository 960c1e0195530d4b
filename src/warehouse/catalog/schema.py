"""The catalog's tables (SQLAlchemy Core). Migrations in ``migrations/`` create them.

Times are Unix seconds (float) so that SQLite and PostgreSQL store the same
thing; ``datetime(at, 'unixepoch')`` or ``to_timestamp(at)`` reads them.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "block_writes",
    "collected",
    "collection_holders",
    "collection_listing_parts",
    "collection_listings",
    "collection_parts",
    "collections",
    "grants",
    "group_members",
    "groups",
    "keep_services",
    "metadata",
    "name_history",
    "name_writers",
    "names",
    "regol_runs",
    "regol_watches",
    "settings",
    "tokens",
    "users",
    "volume_usage",
    "workflow_nodes",
    "workflow_runs",
]

metadata = sa.MetaData()

PDH = sa.String(48)  # 32 hex + "+" + up to 15 digits

collections = sa.Table(
    "collections",
    metadata,
    sa.Column("pdh", PDH, primary_key=True),
    # Locators of the blocks holding the manifest text, space-separated.
    sa.Column("manifest_blocks", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("file_count", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("created_by", sa.String(255), nullable=False),
    # No longer written: listings are kept per user in collection_listings.
    sa.Column("file_md5s", sa.Text, nullable=True),
    # The summed size of its distinct blocks, as a user's put recorded it
    # (migration 0015; NULL before it, or when no put recorded it): the
    # quota counts the larger of this and ``size`` (docs/server.md "Quota").
    sa.Column("block_bytes", sa.BigInteger, nullable=True),
)

# md5sum listings as each user's own `wh put` read them: a listing is shown
# only to the user who sent it, so nobody can make another's get print false
# digests (docs/security.md).
collection_listings = sa.Table(
    "collection_listings",
    metadata,
    sa.Column("pdh", PDH, primary_key=True),
    sa.Column("user", sa.String(255), primary_key=True),
    sa.Column("file_md5s", sa.Text, nullable=False),  # JSON {path: md5}
    sa.Column("recorded_at", sa.Float, nullable=False),
)

# A listing too big to be written as one value (a put of many files holds
# no more than a part of it at once): its JSON text is the parts joined in
# order, and its collection_listings row holds "{}" (a listing of nothing, as
# a reader that knows no parts takes it: it hashes the files it reads).
collection_listing_parts = sa.Table(
    "collection_listing_parts",
    metadata,
    sa.Column("pdh", PDH, primary_key=True),
    sa.Column("user", sa.String(255), primary_key=True),
    sa.Column("part", sa.Integer, primary_key=True),
    sa.Column("text", sa.Text, nullable=False),
)

# Collections GC has collected (DESIGN §6): never roots again, unless stored again.
collected = sa.Table(
    "collected",
    metadata,
    sa.Column("pdh", PDH, primary_key=True),
    sa.Column("collected_at", sa.Float, nullable=False),
)

names = sa.Table(
    "names",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    # Indexed (migration 0013): a private collection is read through the names on it.
    sa.Column("pdh", PDH, nullable=False, index=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("updated_by", sa.String(255), nullable=False),
)

name_history = sa.Table(
    "name_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False, index=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("old_pdh", PDH, nullable=True),
    sa.Column("new_pdh", PDH, nullable=True),
    sa.Column("by", sa.String(255), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.UniqueConstraint("name", "version"),
)

name_writers = sa.Table(
    "name_writers",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("user", sa.String(255), primary_key=True),
)

block_writes = sa.Table(
    "block_writes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False, index=True),
    sa.Column("user", sa.String(255), nullable=False, index=True),
    sa.Column("md5", sa.String(32), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("new", sa.Boolean, nullable=False),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("admin", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("user", sa.String(255), sa.ForeignKey("users.name"), nullable=False),
    sa.Column("label", sa.String(255), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=True),
)

keep_services = sa.Table(
    "keep_services",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("url", sa.String(1024), nullable=False, unique=True),
    sa.Column("registered_at", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
)

settings = sa.Table(
    "settings",
    metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

# -- batch jobs (migration 0003) ---------------------------------------------

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("function", sa.Text, nullable=False),  # the spec as given
    sa.Column("function_pdh", PDH, nullable=False, index=True),  # the resolved version
    sa.Column("function_path", sa.Text, nullable=False),
    sa.Column("function_commit", sa.String(64), nullable=True),  # git functions only
    sa.Column("input_pdh", PDH, nullable=False, index=True),
    sa.Column("params", sa.Text, nullable=False),  # canonical JSON
    sa.Column("cpus", sa.Integer, nullable=False),
    sa.Column("memory", sa.BigInteger, nullable=False),  # bytes, 0 = no request
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("executor", sa.String(255), nullable=False),
    # queued, running, paused, complete, failed, cancelled
    sa.Column("state", sa.String(16), nullable=False, index=True),
    # cancel, pause or resume, asked for by another process; the manager applies it.
    sa.Column("control", sa.String(16), nullable=True, index=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("output_pdh", PDH, nullable=True),
    sa.Column("log_pdh", PDH, nullable=True, index=True),
    sa.Column("reuse_key", sa.String(64), nullable=False, index=True),
    sa.Column("reused_from", sa.Integer, nullable=True),
    sa.Column("steps_done", sa.Integer, nullable=False),
    sa.Column("steps_running", sa.Integer, nullable=False),
    sa.Column("steps_queued", sa.Integer, nullable=False),
    sa.Column("failed_attempts", sa.Integer, nullable=False),
    sa.Column("cpu_seconds", sa.Float, nullable=False),  # wall time x cpus of every attempt
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("submitted_by", sa.String(255), nullable=False),
    # Placement (docs/clusters.md): the input bytes of its finished steps, and
    # those of them held on the host that ran the step (with a host map).
    sa.Column("input_bytes", sa.BigInteger, nullable=False, server_default="0", default=0),
    sa.Column("local_bytes", sa.BigInteger, nullable=False, server_default="0", default=0),
    # Lineage and reuse look complete jobs up by what they made.
    sa.Index("ix_jobs_output_pdh_state", "output_pdh", "state"),
    # What the input was given as when not a PDH (a name); migration 0011.
    sa.Column("input_name", sa.Text, nullable=True),
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column("job", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("level", sa.Integer, nullable=False),
    sa.Column("input", sa.Text, nullable=False),
    # queued, running, done, failed, stopped
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),  # attempts started
    sa.Column("failures", sa.Integer, nullable=False),  # attempts that failed
    sa.Column("exit_status", sa.Integer, nullable=True),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("host", sa.String(255), nullable=True),
    sa.Column("output", sa.Text, nullable=True),  # manifest fragment for the job output
    sa.Column("intermediate", sa.Text, nullable=True),  # fragment later steps may read
    sa.Column("log", sa.Text, nullable=True),  # one-file manifest of the last attempt's log
    sa.Column("log_tail", sa.Text, nullable=True),
    # JSON {name: integer} the step reported (migration 0004), e.g. records_in.
    sa.Column("counters", sa.Text, nullable=True),
    # What its attempts used, summed (migration 0014; docs/usage.md); null:
    # not measured.
    sa.Column("cpu_seconds", sa.Float, nullable=True),
    sa.Column("wall_seconds", sa.Float, nullable=True),
    sa.Column("peak_memory", sa.BigInteger, nullable=True),
    sa.Column("read_bytes", sa.BigInteger, nullable=True),
    sa.Column("written_bytes", sa.BigInteger, nullable=True),
    # Bytes of warehouse files the step reported reading (migration 0016).
    sa.Column("input_bytes", sa.BigInteger, nullable=True),
    # The blocks it reported reading, and their bytes, per source: a cache,
    # a local volume, an S3 volume, a keep server, another cluster
    # (migration 0018).
    *(
        sa.Column(f"{what}_{source}", sa.BigInteger, nullable=True)
        for what in ("blocks", "block_bytes")
        for source in ("cache", "local", "s3", "keep", "cluster")
    ),
)

# -- Regol (migration 0005_regol) --------------------------------------------

regol_watches = sa.Table(
    "regol_watches",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),  # the job followed
    sa.Column("function", sa.Text, nullable=False),  # its git: spec
    sa.Column("repository", sa.Text, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("branch", sa.String(255), nullable=False),
    sa.Column("label", sa.String(255), nullable=False),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("active", sa.Boolean, nullable=False),
)

regol_runs = sa.Table(
    "regol_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("watch", sa.Integer, sa.ForeignKey("regol_watches.id"), nullable=False),
    sa.Column("commit", sa.String(64), nullable=False),
    sa.Column("commit_time", sa.Float, nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),  # along the first-parent chain
    sa.Column("job", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
    # The job's state, copied once it has finished (until then: as last seen).
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("output_pdh", PDH, nullable=True),
    sa.Column("run_time", sa.Float, nullable=True),
    sa.Column("cpu_seconds", sa.Float, nullable=True),
    sa.Column("equals_previous", sa.Boolean, nullable=True),
    sa.Column("reused", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("watch", "commit"),
)

# -- workflows (migration 0006_workflows) -------------------------------------

workflow_runs = sa.Table(
    "workflow_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("workflow", sa.String(255), nullable=False),  # the file's `workflow:` name
    # The workflow file, stored as a collection.
    sa.Column("file_pdh", PDH, nullable=False, index=True),
    sa.Column("inputs", sa.Text, nullable=False),  # JSON {name: value} after -i and defaults
    # JSON {spec as written: [PDH, path, commit]}: each function pinned once for the run.
    sa.Column("pins", sa.Text, nullable=False),
    # queued, running, complete, failed, cancelled
    sa.Column("state", sa.String(16), nullable=False, index=True),
    # cancel, asked for by another process; the run's driver applies it.
    sa.Column("control", sa.String(16), nullable=True),
    sa.Column("owner", sa.String(255), nullable=False, index=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("name_outputs", sa.String(255), nullable=True),  # prefix for outputs' names
    sa.Column("outputs", sa.Text, nullable=True),  # JSON {output name: PDH} once complete
    sa.Column("error", sa.Text, nullable=True),
    # SHA-256 of file PDH, inputs and prefix: the same command again finds its run.
    sa.Column("run_key", sa.String(64), nullable=False, index=True),
    # Who drives the run ("host:pid" or "controller:..."), and its last sign of life.
    sa.Column("driver", sa.String(255), nullable=True),
    sa.Column("heartbeat_at", sa.Float, nullable=True),
    # Raised by every write a reader of the run would see (not a heartbeat);
    # a node carries the run's version of its last change (migration 0020):
    # a waiting client asks only for what changed since the version it has.
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),
    # A complete CWL run's output object: a collection holding cwl.output.json
    # (migration 0021), what answers the same run again (docs/cwl.md).
    sa.Column("output_object", PDH, nullable=True),
    # The one collection of its output files, which the output object's
    # keep: locations name (migration 0023): a gc root while the run is kept.
    sa.Column("output_files", PDH, nullable=True),
)

workflow_nodes = sa.Table(
    "workflow_nodes",
    metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("workflow_runs.id"), primary_key=True),
    sa.Column("node", sa.String(255), primary_key=True),  # the job's name in the file
    sa.Column("position", sa.Integer, nullable=False),  # in the file's order of jobs
    sa.Column("function", sa.Text, nullable=False),  # the spec as written
    sa.Column("job_id", sa.Integer, nullable=True, index=True),
    # waiting, queued, running, complete, failed, cancelled, skipped
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reused", sa.Boolean, nullable=False),
    sa.Column("input_pdh", PDH, nullable=True),
    sa.Column("output_pdh", PDH, nullable=True),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("depends_on", sa.Text, nullable=False),  # JSON list of node names
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),  # see workflow_runs
)

# A combined collection (DESIGN §5.5) and its parts, in order: part ``part_pdh``
# appears under ``./dir`` of collection ``pdh``.
collection_parts = sa.Table(
    "collection_parts",
    metadata,
    sa.Column("pdh", PDH, primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("dir", sa.String(1024), nullable=False),
    sa.Column("part_pdh", PDH, nullable=False, index=True),
)


# -- permissions (migration 0013_permissions; docs/permissions.md) ------------

# Every user who recorded a collection (its first, ``collections.created_by``,
# among them): each held all its bytes, and manages it.
collection_holders = sa.Table(
    "collection_holders",
    metadata,
    sa.Column("pdh", PDH, primary_key=True),
    sa.Column("user", sa.String(255), primary_key=True),
)

groups = sa.Table(
    "groups",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("owner", sa.String(255), nullable=False),  # a user: adds and removes members
    sa.Column("created_at", sa.Float, nullable=False),
)

group_members = sa.Table(
    "group_members",
    metadata,
    sa.Column("group_name", sa.String(255), sa.ForeignKey("groups.name"), primary_key=True),
    sa.Column("user", sa.String(255), primary_key=True, index=True),
)

# ``level`` on ``target`` (a name or project path, a PDH, job:ID, run:ID) for
# a user or a group; one grant per target and grantee (sharing again changes it).
grants = sa.Table(
    "grants",
    metadata,
    sa.Column("target", sa.String(1024), primary_key=True),
    sa.Column("grantee_kind", sa.String(8), primary_key=True),  # user | group
    sa.Column("grantee", sa.String(255), primary_key=True),
    sa.Column("level", sa.String(8), nullable=False),  # read | write | manage
    sa.Column("granted_by", sa.String(255), nullable=False),
    sa.Column("granted_at", sa.Float, nullable=False),
)

# S3 credentials (migration 0017; docs/s3-gateway.md): an access key id a
# user made with one of its tokens. The secret is not stored: it is derived
# from the controller's key and ``salt``. A credential works only while the
# token ``token_hash`` does.
s3_credentials = sa.Table(
    "s3_credentials",
    metadata,
    sa.Column("access_key_id", sa.String(32), primary_key=True),
    sa.Column("user", sa.String(255), sa.ForeignKey("users.name"), nullable=False, index=True),
    sa.Column("token_hash", sa.String(64), nullable=False, index=True),
    sa.Column("salt", sa.String(64), nullable=False),
    sa.Column("label", sa.String(255), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

# Per volume (migration 0019; docs/usage.md): each row the requests a
# process or keep server counted since its previous row (by billed kind)
# and the bytes the volume held at ``at`` (null: not known).
volume_usage = sa.Table(
    "volume_usage",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("volume", sa.String(1024), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("stored_bytes", sa.BigInteger, nullable=True),
    sa.Column("gets", sa.BigInteger, nullable=False),
    sa.Column("puts", sa.BigInteger, nullable=False),
    sa.Column("lists", sa.BigInteger, nullable=False),
    sa.Column("deletes", sa.BigInteger, nullable=False),
    # The spooled record folded into this row (migration 0022); None for a
    # row written directly.
    sa.Column("record", sa.String(32), nullable=True),
    sa.Index("ix_volume_usage_volume_at", "volume", "at"),
    sa.Index("ux_volume_usage_record", "record", unique=True),
)
