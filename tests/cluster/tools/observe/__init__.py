"""``ringlog top``, ``metrics``, ``profile`` and the demo's table read the stats pages."""
