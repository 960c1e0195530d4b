"""Blocks: content-addressed chunks of at most 64 MiB, named by locators."""

from warehouse.blocks.locator import (
    EMPTY_LOCATOR,
    EMPTY_MD5,
    MAX_BLOCK_SIZE,
    Locator,
    LocatorError,
)

__all__ = [
    "EMPTY_LOCATOR",
    "EMPTY_MD5",
    "MAX_BLOCK_SIZE",
    "Locator",
    "LocatorError",
]
