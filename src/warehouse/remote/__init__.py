"""The client side of a remote warehouse: its HTTP API and its keep servers."""
