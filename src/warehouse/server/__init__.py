"""The servers: the controller (``wh serve``), the keep server (``wh keepd``), and ``serving``."""
