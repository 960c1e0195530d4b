"""The job manager's side of placement: a step's input blocks and where they sit.

A step's input is found in the job's input collection from its input string:
a stream name (``./reads``) or a stream's index (``7``), the two ways the
builtin functions name a stream. Other inputs have no known blocks, so such a
step is placed as it would be anyway. A block sits on its first
``replication`` keep servers in probe order (where writers put it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from warehouse.blocks import Locator
from warehouse.clusters.placement import HostMap, block_servers, bytes_by_host
from warehouse.manifest import Manifest
from warehouse.remote.keepclient import KeepClient

__all__ = ["Placer", "step_blocks"]

MAX_INPUTS = 64  # job input manifests kept at once


def step_blocks(manifest: Manifest, step_input: str) -> list[Locator]:
    """The non-empty blocks of the stream ``step_input`` names, or none."""
    streams = manifest.streams
    chosen = [s for s in streams if s.name == step_input]
    if not chosen and step_input.isdigit() and int(step_input) < len(streams):
        chosen = [streams[int(step_input)]]
    return [loc for s in chosen for loc in s.locators if not loc.is_empty]


class Placer:
    def __init__(
        self, host_map: HostMap, keep: Callable[[], KeepClient], load: Callable[[str], Manifest]
    ) -> None:
        self.host_map = host_map
        self._keep = keep
        self._load = load
        self._inputs: dict[str, Manifest] = {}
        self._lock = threading.Lock()

    def held(self, input_pdh: str, step_input: str) -> tuple[dict[str, int], int]:
        """Bytes of the step's input on each host label, and its input bytes."""
        if not step_input or not self.host_map.keep:
            return {}, 0
        with self._lock:
            manifest = self._inputs.get(input_pdh)
        if manifest is None:
            manifest = self._load(input_pdh)
            with self._lock:
                if len(self._inputs) >= MAX_INPUTS:
                    self._inputs.pop(next(iter(self._inputs)))
                self._inputs[input_pdh] = manifest
        blocks = step_blocks(manifest, step_input)
        if not blocks:
            return {}, 0
        keep = self._keep()
        located = [
            (loc, [s.url for s in block_servers(loc.md5, keep.services, keep.replication)])
            for loc in blocks
        ]
        return bytes_by_host(located, self.host_map.keep), sum(loc.size for loc in blocks)
