"""The perf suite tests keep their one fixture (``quickest``: a ``python -m perf --quickest``
run shared by the module) in their file."""
