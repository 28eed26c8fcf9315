"""The controller tests keep their fixtures (``env``: a data directory, a metadata page,
brokers played by flock registrations; ``three``) in their one file."""
