"""Native code built with the package (when a C compiler was there), each with a Python fallback."""
