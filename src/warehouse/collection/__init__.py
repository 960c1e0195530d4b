"""Collections: trees of files written into blocks and a manifest, and read back."""
