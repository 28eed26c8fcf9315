"""The tools that read the per-process stats pages (``cluster.stats``): ``ringlog top``
(``top``), ``ringlog metrics`` (``metrics``, over ``exposition``), ``ringlog profile``
(``profile``, over ``sampler`` and ``report``), and the per-process table ``make demo``
ends with (``report.process_table``). ``rows`` turns snapshots into the figures they show.

rich, matplotlib and prometheus_client are imported inside the functions that draw or
serve, never at module level: client processes import ``cluster`` and must not load them.
"""
