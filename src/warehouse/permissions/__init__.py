"""Owners, groups and grants: who may read, write or manage what (DESIGN §9.1).

The decisions are pure (``_decide``): the catalog supplies the owners and
grants, the controller asks. Rules and what is enforced where:
docs/permissions.md.
"""

from __future__ import annotations

from warehouse.permissions._decide import (
    Owner,
    collection_level,
    granted_level,
    level_of,
    project_paths,
    refusal,
)
from warehouse.permissions._model import (
    GRANTEE_KINDS,
    Grant,
    GroupRecord,
    Level,
    Mode,
    Perms,
    Principal,
    check_target,
    parse_level,
    parse_mode,
)

__all__ = [
    "GRANTEE_KINDS",
    "Grant",
    "GroupRecord",
    "Level",
    "Mode",
    "Owner",
    "Perms",
    "Principal",
    "check_target",
    "collection_level",
    "granted_level",
    "level_of",
    "parse_level",
    "parse_mode",
    "project_paths",
    "refusal",
]
